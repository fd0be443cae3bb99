"""The MLflow tracker: each run an MLflow run, over the tracking server's REST API.

Plain HTTP (urllib, a timeout on every request), not the ``mlflow`` package: the daemon
stays light, and the calls are few: an experiment (``[trackers] mlflow_experiment``,
found or made), a run per rngdctl run (tagged ``rngdctl.home`` and ``rngdctl.run``, so a
run made before its id was stored is found again, not made twice), ``log-batch`` for the
config (params) and the points (metrics; the baseline's under ``baseline/``), the note
as an artifact (the server's proxied artifact API, ``mlflow server --serve-artifacts``,
the default since MLflow 2.0) and the run's status.

**Exactly once.** A point's timestamp is its step's own time, so a batch sent again (the
daemon killed between the server's answer and the cursor) is the same rows, which the
server's SQL store keeps once; a file store would keep both (the window is one batch).
"""

from __future__ import annotations

import base64
import json
import logging
import math
import os
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable

from daemon.errors import BadInput, TrackerError
from daemon.trackers.points import Ending, hyperparameters
from daemon.trackers.send import Batch, Unreachable
from trainer import records

log = logging.getLogger("rngdctl.trackers")

KIND = "mlflow"
#: MLflow's limits per log-batch request: metrics, params, tags.
MAX_METRICS, MAX_PARAMS = 1000, 100
#: An answer larger than this is not the tracking server's: read no further.
MAX_ANSWER_BYTES = 16 << 20
#: How an rngdctl run's end is an MLflow run's status.
STATUS = {"done": "FINISHED", "cancelled": "KILLED"}  # the rest (failed, oom, timeout): FAILED


def check_uri(uri: str, where: str = "--mlflow") -> str:
    """The tracking server's URI, http or https, without a trailing slash; BadInput else."""
    parts = urllib.parse.urlsplit(str(uri).strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BadInput(f"{where}: give the tracking server's http:// or https:// address "
                       f"(such as http://127.0.0.1:5000), got {uri!r}")
    if parts.query or parts.fragment:
        raise BadInput(f"{where}: {uri!r} has a query or a fragment: give the server's address")
    return urllib.parse.urlunsplit(parts._replace(path=parts.path.rstrip("/")))


def key_of(uri: str) -> str:
    return f"{KIND}:{check_uri(uri)}"


class MLflowError(TrackerError):
    """The server refused a request (a 4xx): one line with its error code and message."""

    def __init__(self, status: int, code: str, message: str):
        super().__init__(f"MLflow answered {status} {code}: {message}")
        self.status, self.code = status, code


class MLflow:
    """Sends runs to the tracking server at ``uri``, in ``experiment``; each request times
    out after ``timeout`` seconds (then the server counts as unreachable)."""

    def __init__(self, uri: str, *, experiment: str = "rngdctl", timeout: float = 10.0):
        self.uri = check_uri(uri)
        self.key = f"{KIND}:{self.uri}"
        self.experiment = experiment
        self.timeout = timeout
        self._experiment_id: str | None = None

    def __repr__(self) -> str:
        return f"MLflow {self.uri}"

    # === HTTP ================================================================

    def _call(self, method: str, path: str, body: dict | None = None, *,
              query: dict | None = None, data: bytes | None = None,
              api: str = "api/2.0/mlflow") -> dict:
        url = f"{self.uri}/{api}/{path}"
        if query:
            url += "?" + urllib.parse.urlencode(query)
        headers = {**_auth()}
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as answer:
                text = answer.read(MAX_ANSWER_BYTES)
        except urllib.error.HTTPError as exc:
            raise _refusal(exc) from None
        except (OSError, ValueError) as exc:  # refused, reset, timed out, not HTTP at all
            reason = getattr(exc, "reason", None) or exc
            raise Unreachable(f"{self.uri}: {reason}") from None
        try:
            return json.loads(text) if text.strip() else {}
        except ValueError:
            raise Unreachable(f"{self.uri}: not MLflow's answer to {path} "
                              f"({text[:80]!r})") from None

    # === the run there =======================================================

    def where(self, store, run: dict) -> str:
        """Where the run is there, in words: its page on the server."""
        remote = store.tracker_run(self.key, run["id"])["remote"]
        return f"{self.uri}/#/experiments/{self._experiment()}/runs/{remote}"

    def begin(self, store, run: dict) -> None:
        state = store.tracker_run(self.key, run["id"])
        remote = state["remote"]
        if remote is None:
            remote = self._find(store, run) or self._create(store, run)
            store.set_tracker_run(self.key, run["id"], remote=remote)
        if not state["params"]:
            params = [{"key": k, "value": _param(v)}
                      for k, v in hyperparameters(store, run).items()]
            for i in range(0, len(params), MAX_PARAMS):
                self._log(store, run, remote, params=params[i:i + MAX_PARAMS])
            store.set_tracker_run(self.key, run["id"], params=1)
        if state["ended"] is not None and run.get("ended") is None:  # resumed: running again
            self._call("POST", "runs/update", {"run_id": remote, "status": "RUNNING"})
            store.set_tracker_run(self.key, run["id"], ended=None)

    def _experiment(self) -> str:
        if self._experiment_id is None:
            self._experiment_id = self._find_experiment() or self._make_experiment()
        return self._experiment_id

    def _find_experiment(self) -> str | None:
        try:
            found = self._call("GET", "experiments/get-by-name",
                               query={"experiment_name": self.experiment})["experiment"]
        except MLflowError as exc:
            if exc.code == "RESOURCE_DOES_NOT_EXIST":
                return None
            raise
        if found.get("lifecycle_stage") == "deleted":
            raise MLflowError(400, "DELETED", f"the experiment {self.experiment!r} is deleted "
                              "there: restore it, or name another ([trackers] "
                              "mlflow_experiment)")
        return str(found["experiment_id"])

    def _make_experiment(self) -> str:
        try:
            return str(self._call("POST", "experiments/create",
                                  {"name": self.experiment})["experiment_id"])
        except MLflowError as exc:
            if exc.code == "RESOURCE_ALREADY_EXISTS":  # made meanwhile by another writer
                return self._find_experiment()
            raise

    def _find(self, store, run: dict) -> str | None:
        """The run's MLflow run, made before its id was stored (a daemon killed between)."""
        query = (f"tags.`rngdctl.home` = '{store.home_id}' and "
                 f"tags.`rngdctl.run` = '{run['id']}'")
        found = self._call("POST", "runs/search", {"experiment_ids": [self._experiment()],
                                                   "filter": query, "max_results": 1})
        runs = found.get("runs") or []
        return runs[0]["info"]["run_id"] if runs else None

    def _create(self, store, run: dict) -> str:
        name = run.get("name") or f"run-{run['id']}"
        tags = {"rngdctl.home": store.home_id, "rngdctl.run": str(run["id"]),
                "rngdctl.name": name}
        made = self._call("POST", "runs/create", {
            "experiment_id": self._experiment(), "run_name": name,
            "start_time": _ms(run.get("started") or run["created"]),
            "tags": [{"key": k, "value": v} for k, v in tags.items()]})
        return made["run"]["info"]["run_id"]

    def _log(self, store, run: dict, remote: str, **batch) -> None:
        """One log-batch; a run deleted there is made again, with everything sent again."""
        try:
            self._call("POST", "runs/log-batch", {"run_id": remote, **batch})
        except MLflowError as exc:
            if exc.code == "RESOURCE_DOES_NOT_EXIST":
                store.forget_tracker_run(self.key, run["id"])
            raise

    # === points ==============================================================

    def send_pass(self, store, run: dict, label: str, read: Callable[[dict], Batch]) -> Batch:
        cursor = store.tracker_pass(self.key, run["id"], label)
        batch = read(cursor)
        if not len(batch):
            return batch
        remote = store.tracker_run(self.key, run["id"])["remote"]
        prefix = "" if label == records.MAIN else f"{_safe(label)}/"
        fallback = run.get("started") or run["created"]
        metrics = [{"key": prefix + tag, "value": _number(value),
                    "timestamp": _ms(p.time if p.time is not None else fallback),
                    "step": p.step}
                   for p in (*batch.steps, *batch.evals) for tag, value in p.values.items()]
        for i in range(0, len(metrics), MAX_METRICS):
            self._log(store, run, remote, metrics=metrics[i:i + MAX_METRICS])
        store.set_tracker_pass(self.key, run["id"], label, step=batch.step,
                               eval_step=batch.eval_step)
        return batch

    # === the end =============================================================

    def finish(self, store, run: dict, end: Ending) -> None:
        remote = store.tracker_run(self.key, run["id"])["remote"]
        tags = [{"key": "rngdctl.status", "value": end.status}]
        if end.note is not None:
            tags.append({"key": "rngdctl.note", "value": self._attach(remote, *end.note)})
        metrics = [{"key": k, "value": _number(v), "timestamp": _ms(end.ended),
                    "step": end.last_step} for k, v in end.model.items()]
        self._log(store, run, remote, metrics=metrics, tags=tags)
        self._call("POST", "runs/update", {"run_id": remote,
                                           "status": STATUS.get(end.status, "FAILED"),
                                           "end_time": _ms(end.ended)})
        store.set_tracker_run(self.key, run["id"], ended=end.ended)

    def _attach(self, remote: str, name: str, text: str) -> str:
        """Upload the note as the run's artifact ``note/<name>``; what became of it, for the
        run's ``rngdctl.note`` tag."""
        where = self._call("GET", "runs/get", query={"run_id": remote})["run"]["info"]
        root = where.get("artifact_uri") or ""
        if not root.startswith("mlflow-artifacts:"):
            why = (f"not attached: the server's artifact store is {root or 'unknown'}, not "
                   "served through it (mlflow server --serve-artifacts)")
            log.warning("note of MLflow run %s %s", remote, why)
            return why
        path = urllib.parse.urlsplit(root).path.strip("/")
        self._call("PUT", f"{path}/note/{urllib.parse.quote(name)}", data=text.encode(),
                   api="api/2.0/mlflow-artifacts/artifacts")
        return f"note/{name}"


def _refusal(exc: urllib.error.HTTPError) -> Exception:
    """A 5xx or 429 is the server's trouble (retried); a 4xx is this request's."""
    try:
        answer = json.loads(exc.read(64 * 1024) or b"{}")
    except (ValueError, OSError):
        answer = {}
    code = str(answer.get("error_code") or exc.reason or "")
    message = str(answer.get("message") or "").splitlines()[0:1]
    text = message[0][:300] if message else ""
    if exc.code >= 500 or exc.code == 429:
        return Unreachable(f"{exc.url}: {exc.code} {code} {text}".rstrip())
    return MLflowError(exc.code, code, text)


def _auth() -> dict[str, str]:
    """MLflow's own variables for a server behind authentication."""
    token = os.environ.get("MLFLOW_TRACKING_TOKEN")
    if token:
        return {"Authorization": f"Bearer {token}"}
    user, password = (os.environ.get("MLFLOW_TRACKING_USERNAME"),
                      os.environ.get("MLFLOW_TRACKING_PASSWORD"))
    if user and password:
        basic = base64.b64encode(f"{user}:{password}".encode()).decode()
        return {"Authorization": f"Basic {basic}"}
    return {}


def _ms(seconds: float) -> int:
    return round(float(seconds) * 1000)


def _number(x: float) -> float | str:
    """A metric's value as MLflow's JSON takes it: NaN and infinities as words."""
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    return float(x)


def _param(value) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def _safe(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", label)[:60] or "_"
