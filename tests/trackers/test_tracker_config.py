"""[trackers] in config.toml: each value checked when the config is read, in one line."""

from __future__ import annotations

import pytest

from daemon.errors import ConfigError
from daemon.home import parse_config


@pytest.mark.parametrize("text, words", [
    ('tensorboard = "runs/tb"', "[trackers] tensorboard: give an absolute path"),
    ('tensorboard = "/"', "[trackers] tensorboard: / is a system folder"),
    ("tensorboard = 5", "[trackers] tensorboard: give a folder, got 5"),
    ('mlflow = "localhost:5000"', "[trackers] mlflow: give the tracking server's http://"),
    ("mlflow = ['http://x']", "[trackers] mlflow: give the tracking server's address"),
    ('mlflow_experiment = ""', "[trackers] mlflow_experiment must be a name"),
    ("timeout = 0", "[trackers] timeout must be > 0"),
])
def test_a_bad_tracker_setting_is_one_line_naming_it(text, words):
    with pytest.raises(ConfigError, match="^/h/config.toml: ") as err:
        parse_config(f"[trackers]\n{text}\n", where="/h/config.toml")
    assert words in str(err.value) and "\n" not in str(err.value)


def test_the_trackers_are_read_with_a_folder_made_absolute():
    config = parse_config('[trackers]\ntensorboard = "~/tb"\nmlflow = "http://127.0.0.1:5000/"\n')

    from daemon.trackers.targets import configured

    tensorboard, mlflow = configured(config)
    assert tensorboard.folder.is_absolute() and tensorboard.folder.name == "tb"
    assert mlflow.uri == "http://127.0.0.1:5000" and mlflow.experiment == "rngdctl"


def test_a_home_without_trackers_loads_none_of_their_code(tmp_path):
    import subprocess
    import sys

    from tests.conftest import REPO

    code = ("import sys; from daemon.home import Home; Home(sys.argv[1]).ensure().config(); "
            "print(any(m.startswith('daemon.trackers') for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "home")], cwd=REPO,
                         capture_output=True, text=True, timeout=60, check=True).stdout
    assert out.strip() == "False"
