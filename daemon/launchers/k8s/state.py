"""What the Kubernetes launcher knows between ticks, kept in the store (table launcher_state).

A daemon killed at any instant and started again must act on what the old
one knew, so nothing the launcher decides by lives only in memory:

- per image on the node (``image:<node>:<image>``): ``missing`` (a pull failed
  there, so status.images is not trusted), ``prepull`` (our pre-pull pod's name
  and when it was first seen), ``pulled`` (when our pre-pull pod got it),
  ``failed`` (when the last pre-pull failed, and the kubelet's message),
  ``digest`` (the imageID a pod of ours last ran it as);
- per run (``run:<id>``): ``before`` (device holder pids before the launch),
  ``checked`` (the holders were found ours, or a step came), ``end`` (the
  trainer's end record), ``waiting`` (cards free when the compiled run last
  waited for them), ``compiled`` (the compile Job, image and digest);
- ``api:<run id or daemon>``: an API outage streak is open (one event each);
- ``own``: the pids last found to be our pod's.

Values are small JSON objects; a fact set to None is removed.
"""

from __future__ import annotations

from typing import Any

from daemon.store import Store


class LauncherState:
    def __init__(self, store: Store, clock):
        self.store = store
        self.clock = clock

    # --- images on a node -----------------------------------------------------

    @staticmethod
    def _image_key(node: str, image: str) -> str:
        return f"image:{node}:{image}"

    def image(self, node: str, image: str) -> dict:
        return self.store.launcher_state(self._image_key(node, image)) or {}

    def images(self, node: str) -> dict[str, dict]:
        """Every image on ``node`` we know something about, and what."""
        prefix = self._image_key(node, "")
        return {key[len(prefix):]: value
                for key, value in self.store.launcher_states(prefix).items()}

    def update_image(self, node: str, image: str, **facts: Any) -> dict:
        return self._update(self._image_key(node, image), None, facts)

    # --- runs ---------------------------------------------------------------

    def run(self, run_id: int) -> dict:
        return self.store.launcher_state(f"run:{run_id}") or {}

    def update_run(self, run_id: int, **facts: Any) -> dict:
        return self._update(f"run:{run_id}", run_id, facts)

    def forget_run(self, run_id: int) -> None:
        """The run ended: its facts go (those of its images stay)."""
        self.store.drop_launcher_state(run_id=run_id)

    # --- the API and our pids -----------------------------------------------

    def api_down(self, run_id: int | None) -> bool:
        return self.store.launcher_state(f"api:{run_id or 'daemon'}") is not None

    def set_api_down(self, run_id: int | None, down: bool) -> None:
        key = f"api:{run_id or 'daemon'}"
        if down:
            self.store.set_launcher_state(key, {"since": self.clock()}, run_id=run_id,
                                          now=self.clock())
        else:
            self.store.drop_launcher_state(key)

    def own_pids(self) -> set[int]:
        return set((self.store.launcher_state("own") or {}).get("pids") or [])

    def set_own_pids(self, run_id: int, pids: set[int]) -> None:
        if pids != self.own_pids():
            self.store.set_launcher_state("own", {"run": run_id, "pids": sorted(pids)},
                                          now=self.clock())

    # --- plumbing -------------------------------------------------------------

    def _update(self, key: str, run_id: int | None, facts: dict) -> dict:
        value = self.store.launcher_state(key) or {}
        new = {**value, **facts}
        new = {k: v for k, v in new.items() if v is not None}
        if new == value:
            return value
        if new:
            self.store.set_launcher_state(key, new, run_id=run_id, now=self.clock())
        else:
            self.store.drop_launcher_state(key)
        return new
