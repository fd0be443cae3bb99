"""The TUI's widgets and screens, one per module."""

from rngdctl.tui.widgets.cards import CardsPanel
from rngdctl.tui.widgets.confirm import ConfirmScreen
from rngdctl.tui.widgets.current_run import CurrentRunPanel
from rngdctl.tui.widgets.daemon_bar import DaemonBar
from rngdctl.tui.widgets.events import EventsPanel
from rngdctl.tui.widgets.filter_bar import FilterBar
from rngdctl.tui.widgets.gates import GatesPanel
from rngdctl.tui.widgets.help_screen import HelpScreen
from rngdctl.tui.widgets.history import HistoryPanel
from rngdctl.tui.widgets.holders import HoldersPanel
from rngdctl.tui.widgets.log_tail import LogScreen
from rngdctl.tui.widgets.overlay import OverlayScreen
from rngdctl.tui.widgets.queue import QueuePanel
from rngdctl.tui.widgets.replicas import ReplicasBar
from rngdctl.tui.widgets.run_detail import RunDetailScreen
from rngdctl.tui.widgets.run_plots import RunPlots
from rngdctl.tui.widgets.series_plot import SeriesPlot
from rngdctl.tui.widgets.submit_form import SubmitScreen

__all__ = [
    "CardsPanel", "ConfirmScreen", "CurrentRunPanel", "DaemonBar", "EventsPanel", "FilterBar", "GatesPanel",
    "HelpScreen", "HistoryPanel", "HoldersPanel", "LogScreen", "OverlayScreen", "QueuePanel",
    "ReplicasBar", "RunDetailScreen", "RunPlots", "SeriesPlot", "SubmitScreen",
]
