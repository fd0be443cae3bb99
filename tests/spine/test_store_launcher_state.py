"""The launcher_state table: what a launcher knows between ticks outlives the process."""

from __future__ import annotations

from daemon.store import Store


def test_a_launcher_fact_survives_reopening_the_store_and_goes_with_its_run(tmp_path):
    path = tmp_path / "rngdctl.db"
    with Store(path) as s:
        run_id = s.add_run({"cards": 1})
        s.set_launcher_state("image:n1:a:1", {"missing": True}, now=1.0)
        s.set_launcher_state("image:n1:b:2", {"pulled": 2.0}, now=2.0)
        s.set_launcher_state("image:n2:a:1", {"pulled": 3.0}, now=3.0)
        s.set_launcher_state(f"run:{run_id}", {"compiled": {"digest": "sha256:ab"}},
                             run_id=run_id, now=4.0)
    with Store(path) as s:  # a new process
        assert s.launcher_state("image:n1:a:1") == {"missing": True}
        assert s.launcher_states("image:n1:") == {"image:n1:a:1": {"missing": True},
                                                  "image:n1:b:2": {"pulled": 2.0}}
        s.drop_launcher_state(run_id=run_id)
        assert s.launcher_state(f"run:{run_id}") is None
        s.drop_launcher_state("image:n1:a:1")
        assert s.launcher_state("image:n1:a:1") is None
        assert s.launcher_state("image:n2:a:1") == {"pulled": 3.0}
