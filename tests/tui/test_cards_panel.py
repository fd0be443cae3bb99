"""The cards panel: one row a card beside the holders, bars of the last minutes, the run or
process holding it; hidden without card readings."""

from __future__ import annotations

import re

from tui_support import NOW, text_of

from rngdctl.tui.data import ViewSource
from rngdctl.tui.widgets.cards import bars


def _reading(store, t, *, run=None, temp=50.0, power=100.0, util=0.5, throttle=()):
    store.add_card_samples([
        {"card": "npu0", "uuid": "u0", "alive": True, "temp_c": temp, "power_w": power,
         "power_limit_w": 180.0, "util": util, "memory_used": 6 << 30,
         "memory_total": 47 << 30, "run_id": run, "throttle": list(throttle),
         "throttled": bool(throttle)},
        {"card": "npu1", "uuid": "u1", "alive": False, "temp_c": 40.0, "power_w": 35.0,
         "power_limit_w": 180.0, "util": 0.0, "memory_used": 0, "memory_total": 47 << 30,
         "throttle": [], "throttled": False}], now=t)


def test_bars_draw_each_buckets_highest_reading_on_a_fixed_scale():
    assert bars((20.0, 60.0, 100.0), 20.0, 100.0, width=3) == "▁▅█"
    assert bars(tuple(range(10)), 0.0, 10.0, width=5) == "▁▃▅▆█"  # 1, 3, 5, 7, 9 of 10
    assert bars((0.0, 1.0), 0.0, 1.0, width=4) == "  ▁█"  # fewer readings than bars
    assert bars((), 0.0, 1.0) == "    "


async def test_each_card_is_a_row_with_bars_and_who_holds_it(make_app, settle, store, ids):
    for i, temp in enumerate([45.0, 55.0, 65.0, 75.0, 85.0]):
        _reading(store, NOW - 50 + 10 * i, run=ids["r200"], temp=temp, power=60.0 + 20 * i,
                 throttle=("ThermalSlowdown",) if temp > 80 else ())
    async with make_app().run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        subtitle = pilot.app.query_one("#cards").border_subtitle
        frame = text_of(pilot.app, "#cards")
    header, npu0, npu1 = (re.split(r"\s{2,}", line.strip(" │")) for line in
                          frame.splitlines()[1:4])
    assert header == ["card", "temp", "power", "util", "memory", "held"]
    assert npu0[0] == "npu0 ⚠" and npu1[0] == "npu1 ✗"
    assert npu0[1] == "▃▄▅▇ 85.0 °C"  # 45-85 °C on 20-100, in 4 buckets: 45, 55, 65, 85
    assert npu0[2].endswith(" 140 W") and npu0[3] == "▅▅▅▅ 50 %"
    assert npu0[4] == "6.0/47 GiB" and npu0[5] == f"#{ids['r200']}"
    assert npu1[5] == "–"
    assert subtitle == "2 cards, 1 not alive, 1 throttling · read 10 s ago"
    assert "[6] cards" in frame


async def test_without_card_readings_the_panel_is_hidden(make_app, settle):
    async with make_app().run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        assert pilot.app.query_one("#cards").display is False


def test_the_panel_reads_only_new_rows_and_forgets_cards_gone_quiet(store, home):
    source = ViewSource(store, home=home.path, clock=lambda: NOW)
    _reading(store, NOW - 700)  # older than the window: never shown
    assert source.cards(NOW) == ()
    _reading(store, NOW - 20, temp=60.0)
    first = source.cards(NOW)
    assert [(r.card, r.temps) for r in first] == [("npu0", (60.0,)), ("npu1", (40.0,))]
    _reading(store, NOW - 10, temp=70.0)
    assert source.cards(NOW)[0].temps == (60.0, 70.0)
    assert source.cards(NOW + 585)[0].temps == (70.0,)  # the first reading left the window
    assert source.cards(NOW + 700) == ()
