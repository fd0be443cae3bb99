"""config.toml (issue 33, "Config"): every error names the file, every number has a range,
and every command that opens the home reads it, `runs` and `submit` included."""

from __future__ import annotations

import pytest

from daemon.errors import ConfigError
from daemon.home import RANGES, Home, parse_config

# === every number has a range =================================================

#: A value just out of each number's range.
OUT_OF_RANGE = [(section, name, low - 1 if included else low)
                for section, names in RANGES.items()
                for name, (low, included) in names.items()]


def test_every_numeric_setting_has_a_range():
    from dataclasses import fields

    from daemon.home import _SECTIONS

    numeric = {(section, f.name) for section, cls in _SECTIONS.items() for f in fields(cls)
               if str(f.type).split(" | ")[0] in ("int", "float")}
    ranged = {(section, name) for section, names in RANGES.items() for name in names}
    assert numeric - ranged == set()


@pytest.mark.parametrize("section, name, value", OUT_OF_RANGE)
def test_every_number_out_of_its_range_is_one_line_naming_the_key(section, name, value):
    text = f"[{section}]\n{name} = {value}\n"
    if (section, name) == ("k8s", "renew_deadline"):
        text = f"[k8s]\nrenew_deadline = {value}\nlease_duration = 15.0\n"

    with pytest.raises(ConfigError) as err:
        parse_config(text, where="/h/config.toml")

    message = str(err.value)
    assert message.startswith(f"/h/config.toml: [{section}] {name} must be ")
    assert "\n" not in message


@pytest.mark.parametrize("text, words", [
    ("[daemon]\ntick = -1\n", "[daemon] tick must be > 0 and finite, got -1.0"),
    ("[gates]\nload_max = -5\n", "[gates] load_max must be > 0 and finite, got -5.0"),
    ("[gates]\nload_max = inf\n", "[gates] load_max must be > 0 and finite, got inf"),
    ("[daemon]\ntick = nan\n", "[daemon] tick must be > 0 and finite, got nan"),
    ("[k8s]\nttl_seconds = 0\n", "[k8s] ttl_seconds must be > 0 and at most 2147483647"),
    ("[k8s]\ndefault_deadline = 99999999999\n", "[k8s] default_deadline must be > 0 and at"),
    ("[daemon]\ncancel_grace = 'soon'\n", "[daemon] cancel_grace must be a number"),
    ("[k8s]\nmax_attempts = 2.5\n", "[k8s] max_attempts must be an integer, got 2.5"),
    ("[daemon]\nstop_grace_s = 1e19\n", "[daemon] stop_grace_s must be at most 2147483647"),
    ('[k8s]\npull_policy = "Sometimes"\n',
     "[k8s] pull_policy must be Always, IfNotPresent or Never, got 'Sometimes'"),
    ('[k8s]\nseccomp_profile = "Off"\n', ("[k8s] seccomp_profile must be Unconfined, "
                                         "RuntimeDefault or \"\"")),
    ('[k8s]\noutput_path = "data"\n', "[k8s] output_path must be an absolute path"),
    ('[k8s]\nvolumes = [{name = "x", mount = "/x"}]\n',
     "[k8s] volumes[0] needs exactly one of host_path or pvc"),
    ("[gates]\ndevice_globs = [1]\n", "[gates] device_globs must be a list of paths"),
])
def test_a_bad_value_is_refused_when_the_config_is_read(text, words):
    with pytest.raises(ConfigError, match="^/h/config.toml: ") as err:
        parse_config(text, where="/h/config.toml")
    assert words in str(err.value)


def test_the_defaults_and_the_written_default_file_are_in_range(home):
    assert home.config() == parse_config("")


# === every error names the file, by its full path ===============================


@pytest.mark.parametrize("text", ["[gates\n", "[colours]\n", "[gates]\nload_max = 'high'\n",
                                  "[daemon]\ntick = -1\n", "[notify]\ntimeout = 0\n"])
def test_every_config_error_names_the_files_full_path(tmp_path, monkeypatch, text):
    home = Home(tmp_path / "home").ensure()
    home.config_path.write_text(text)
    monkeypatch.chdir(tmp_path)

    with pytest.raises(ConfigError) as err:
        Home("home").config()  # a relative --home: the error still gives the full path

    assert str(err.value).startswith(f"{tmp_path}/home/config.toml: ")


# === runs and submit read it ==================================================


@pytest.mark.parametrize("command", [["runs"], ["submit", "--cards", "1", "--resident", "0"],
                                     ["show", "1"], ["cancel", "1"]])
def test_a_broken_config_is_one_line_and_exit_2_for_runs_and_submit(rngdctl, home, command):
    assert rngdctl("submit", "--cards", "1", "--resident", "0")[0] == 0
    home.config_path.write_text("[gates]\nload_max = -5\n")

    code, out, err = rngdctl(*command)

    assert (code, out) == (2, "")
    assert err == (f"Error: {home.config_path}: [gates] load_max must be > 0 and finite, "
                   f"got -5.0\n")
