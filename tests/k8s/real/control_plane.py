"""A real Kubernetes control plane on 127.0.0.1, as envtest starts one, plus kwok's kubelets.

etcd, kube-apiserver (serving certificates and a service-account key made here with
openssl, RBAC and Node authorization, the built-in admission chain with PodSecurity,
ResourceQuota and LimitRanger), kube-controller-manager (the Job controller, the garbage
collector, quota) and kube-scheduler, at the release deploy/k8s-test pins, and kwok, which
plays the kubelet of the nodes annotated ``kwok.x-k8s.io/node: fake``: node heartbeats, pod
phases by the stages in ``kwok-stages.yaml``, and container logs from files the test writes
(``Logs`` objects name them). The system components act as ``system:masters`` (the admin
kubeconfig); rngdctl acts as its ServiceAccount (``service_account_kubeconfig``), so the
real authorizer judges deploy/rbac.yaml.

Every process has a start timeout; ``stop`` ends each (SIGTERM, then SIGKILL) by its pid.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
STAGES = HERE / "kwok-stages.yaml"
START_TIMEOUT_S = 120.0  # each component, on 2 busy cores
PORT_TRIES = 3  # starts of a component whose port was taken before it could bind it
STOP_TIMEOUT_S = 15.0
OPENSSL_TIMEOUT_S = 30.0
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc"
FAKE_NODE = {"kwok.x-k8s.io/node": "fake"}  # the annotation kwok manages nodes by


class ControlPlaneError(RuntimeError):
    """A component did not start, or stopped; the message ends with its log's tail."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# === certificates ============================================================


def _openssl(*args: str, cwd: Path) -> None:
    done = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=OPENSSL_TIMEOUT_S, check=False)
    if done.returncode != 0:
        raise ControlPlaneError(f"openssl {args[0]} failed: {done.stderr.strip()[-300:]}")


def _key(name: str, cwd: Path) -> None:
    _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
             "-out", f"{name}.key", cwd=cwd)


def _signed(name: str, subject: str, extensions: list[str], cwd: Path) -> None:
    """``name``.key and ``name``.crt, signed by the test CA, valid one day."""
    _key(name, cwd)
    adds = [arg for ext in extensions for arg in ("-addext", ext)]
    _openssl("req", "-new", "-key", f"{name}.key", "-subj", subject, *adds,
             "-out", f"{name}.csr", cwd=cwd)
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
             "-CAcreateserial", "-days", "1", "-copy_extensions", "copy",
             "-out", f"{name}.crt", cwd=cwd)


def make_certificates(pki: Path) -> None:
    """A CA; serving certificates for the apiserver and kwok's kubelet endpoint; the admin
    client certificate (group system:masters); the service-account signing key pair."""
    pki.mkdir(parents=True, exist_ok=True)
    _key("ca", pki)
    _openssl("req", "-x509", "-new", "-key", "ca.key", "-subj", "/CN=rngdctl-test-ca",
             "-days", "1", "-out", "ca.crt", cwd=pki)
    serving = [("subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,"
               "DNS:kubernetes.default,DNS:kubernetes.default.svc"),
               "extendedKeyUsage=serverAuth", "keyUsage=digitalSignature"]
    _signed("apiserver", "/CN=kube-apiserver", serving, pki)
    _signed("kubelet", "/CN=kwok-kubelet", serving, pki)
    _signed("admin", "/O=system:masters/CN=rngdctl-test-admin",
            ["extendedKeyUsage=clientAuth", "keyUsage=digitalSignature"], pki)
    _key("sa", pki)
    _openssl("pkey", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=pki)


# === kubeconfigs =============================================================


def write_kubeconfig(path: Path, server: str, ca: Path, user: dict) -> Path:
    """A kubeconfig of one cluster, one user and one context (JSON is YAML)."""
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": "test",
        "clusters": [{"name": "test", "cluster": {"server": server,
                                                  "certificate-authority": str(ca)}}],
        "users": [{"name": "test", "user": user}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test"}}],
    }
    path.write_text(json.dumps(config, indent=1))
    path.chmod(0o600)
    return path


# === the processes ===========================================================


class Component:
    """One binary of the control plane, its output in ``<logs>/<name>.log``."""

    def __init__(self, name: str, argv: list[str], logs: Path):
        self.name = name
        self.argv = argv
        self.log_path = logs / f"{name}.log"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def tail(self, lines: int = 15) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def failed(self, what: str) -> ControlPlaneError:
        return ControlPlaneError(f"{self.name} {what}; the end of {self.log_path}:\n"
                                 f"{self.tail()}")

    def stop(self) -> None:
        if not self.alive():
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(STOP_TIMEOUT_S)


class ControlPlane:
    """``start()``, then ``admin_kubeconfig`` and ``server``; ``stop()`` ends it all."""

    def __init__(self, bin_dir: Path, work: Path):
        self.bin = bin_dir
        self.work = work
        self.pki = work / "pki"
        self.logs = work / "logs"
        self.pod_logs = work / "pod-logs"  # the trainer's output, served by kwok
        self.etcd_url = ""
        self.server = ""  # https://127.0.0.1:<port>, once the apiserver listens
        self.admin_kubeconfig = work / "admin.kubeconfig"
        self.components: list[Component] = []
        self.timings: dict[str, float] = {}  # seconds each start step took, for the log

    # --- starting ---------------------------------------------------------------

    def start(self) -> None:
        for folder in (self.logs, self.pod_logs):
            folder.mkdir(parents=True, exist_ok=True)
        with self.timed("certificates"):
            make_certificates(self.pki)
        try:
            with self.timed("etcd"):
                self._start_etcd()
            with self.timed("kube-apiserver"):
                self._start_apiserver()
            write_kubeconfig(self.admin_kubeconfig, self.server, self.pki / "ca.crt", {
                "client-certificate": str(self.pki / "admin.crt"),
                "client-key": str(self.pki / "admin.key")})
            self._start(Component("kube-controller-manager", self._controller_manager(),
                                  self.logs))
            self._start(Component("kube-scheduler", [
                str(self.bin / "kube-scheduler"), f"--kubeconfig={self.admin_kubeconfig}",
                "--leader-elect=false", "--bind-address=127.0.0.1", "--secure-port=0"],
                self.logs))
            with self.timed("kwok's Logs CRD"):
                self.kubectl("apply", "--server-side", "-f",
                             str(self.bin / "kwok-logs-crd.yaml"))
                self.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                             "crd/logs.kwok.x-k8s.io")
            with self.timed("kwok"):
                self._listening("kwok", self._kwok,
                                lambda port: _http_ok(f"http://127.0.0.1:{port}/healthz"),
                                "did not answer /healthz")
        except BaseException:
            self.stop()
            raise

    @contextlib.contextmanager
    def timed(self, step: str):
        """Time a start step into ``timings``."""
        started = time.monotonic()
        try:
            yield
        finally:
            self.timings[step] = time.monotonic() - started

    def _start(self, component: Component) -> Component:
        component.start()
        self.components.append(component)
        return component

    def _listening(self, name: str, argv, ready, what: str, ports: int = 1) -> list[int]:
        """Start ``argv(*ports)`` on free ports and wait until ``ready(*ports)``: the ports
        it was given. A port can be taken between our look and the component's bind (the
        apiserver's own connections to etcd take ephemeral ports): then new ports, again."""
        for attempt in range(1, PORT_TRIES + 1):
            chosen = [free_port() for _ in range(ports)]
            component = self._start(Component(name, argv(*chosen), self.logs))
            try:
                self._wait(component, lambda ports=chosen: ready(*ports), what)
                return chosen
            except ControlPlaneError:
                if attempt == PORT_TRIES or "address already in use" not in component.tail(5):
                    raise
                component.stop()
                self.components.remove(component)
        raise AssertionError("unreachable")

    def _start_etcd(self) -> None:
        def argv(client_port: int, peer_port: int) -> list[str]:
            client, peer = f"http://127.0.0.1:{client_port}", f"http://127.0.0.1:{peer_port}"
            return [str(self.bin / "etcd"), "--name=test", f"--data-dir={self.work / 'etcd'}",
                    f"--listen-client-urls={client}", f"--advertise-client-urls={client}",
                    f"--listen-peer-urls={peer}", f"--initial-advertise-peer-urls={peer}",
                    f"--initial-cluster=test={peer}", "--unsafe-no-fsync", "--log-level=warn"]
        client_port, _ = self._listening(
            "etcd", argv, lambda port, _: _http_ok(f"http://127.0.0.1:{port}/health"),
            "did not answer /health", ports=2)
        self.etcd_url = f"http://127.0.0.1:{client_port}"

    def _start_apiserver(self) -> None:
        [port] = self._listening(
            "kube-apiserver", self._apiserver,
            lambda port: _http_ok(f"https://127.0.0.1:{port}/readyz", self._tls()),
            "did not become ready (/readyz)")
        self.server = f"https://127.0.0.1:{port}"

    def _apiserver(self, port: int) -> list[str]:
        pki = self.pki
        return [
            str(self.bin / "kube-apiserver"), f"--etcd-servers={self.etcd_url}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
            # No endpoints for the kubernetes Service: a loopback address may not be one.
            "--endpoint-reconciler-type=none",
            f"--secure-port={port}", f"--cert-dir={self.work / 'apiserver-certs'}",
            f"--tls-cert-file={pki / 'apiserver.crt'}",
            f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={pki / 'ca.crt'}",
            f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            "--service-cluster-ip-range=10.96.0.0/24",
            "--authorization-mode=Node,RBAC",
            # On top of the default chain (which has them too): said, so that a release
            # that drops one from the defaults does not quietly test less.
            ("--enable-admission-plugins=NodeRestriction,PodSecurity,LimitRanger,"
             "ResourceQuota,ServiceAccount"),
            "--allow-privileged=true",
            # Pod logs: the apiserver asks the node's kubelet, here kwok, at its InternalIP.
            "--kubelet-preferred-address-types=InternalIP",
            f"--kubelet-certificate-authority={pki / 'ca.crt'}",
            f"--kubelet-client-certificate={pki / 'admin.crt'}",
            f"--kubelet-client-key={pki / 'admin.key'}",
            "--profiling=false"]

    def _controller_manager(self) -> list[str]:
        return [str(self.bin / "kube-controller-manager"),
                f"--kubeconfig={self.admin_kubeconfig}", "--leader-elect=false",
                "--bind-address=127.0.0.1", "--secure-port=0",
                f"--service-account-private-key-file={self.pki / 'sa.key'}",
                f"--root-ca-file={self.pki / 'ca.crt'}"]

    def _kwok(self, port: int) -> list[str]:
        """kwok's kubelet endpoint (logs) is the nodes' InternalIP 127.0.0.1 and ``port``."""
        return [str(self.bin / "kwok"), f"--kubeconfig={self.admin_kubeconfig}",
                f"--config={STAGES}", "--manage-all-nodes=false",
                "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
                "--node-ip=127.0.0.1", f"--node-port={port}",
                f"--server-address=127.0.0.1:{port}",
                f"--tls-cert-file={self.pki / 'kubelet.crt'}",
                f"--tls-private-key-file={self.pki / 'kubelet.key'}", "--enable-crds=Logs"]

    def _tls(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.pki / "ca.crt"))
        context.load_cert_chain(self.pki / "admin.crt", self.pki / "admin.key")
        return context

    @staticmethod
    def _wait(component: Component, ready, what: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if not component.alive():
                raise component.failed("exited at start")
            if ready():
                return
            time.sleep(0.2)
        raise component.failed(f"{what} within {START_TIMEOUT_S:.0f} s")

    # --- using it ---------------------------------------------------------------

    def check_alive(self) -> None:
        for component in self.components:
            if not component.alive():
                raise component.failed("has stopped")

    def kubectl(self, *args: str, input: str | None = None, timeout: float = 120,
                kubeconfig: Path | None = None) -> str:
        """The built kubectl, as the admin unless ``kubeconfig`` says otherwise."""
        done = subprocess.run([str(self.bin / "kubectl"),
                               f"--kubeconfig={kubeconfig or self.admin_kubeconfig}", *args],
                              input=input, capture_output=True, text=True, timeout=timeout,
                              check=False)
        if done.returncode != 0:
            raise ControlPlaneError(f"kubectl {' '.join(args)} exited {done.returncode}: "
                                    f"{done.stderr.strip()[-500:]}")
        return done.stdout

    def service_account_kubeconfig(self, namespace: str, name: str, path: Path,
                                   seconds: int = 3600, pod: str | None = None) -> Path:
        """A kubeconfig with a token of the ServiceAccount (TokenRequest, as the admin);
        with ``pod``, bound to that pod of the namespace as the kubelet's token for it is
        (the API then knows the pod's node from it)."""
        bound = ["--bound-object-kind=Pod", f"--bound-object-name={pod}"] if pod else []
        token = self.kubectl("create", "token", name, "-n", namespace,
                             f"--duration={seconds}s", *bound).strip()
        return write_kubeconfig(path, self.server, self.pki / "ca.crt", {"token": token})

    # --- stopping ---------------------------------------------------------------

    def stop(self) -> None:
        """Each component, the last started first."""
        for component in reversed(self.components):
            component.stop()
        self.components = []


def _http_ok(url: str, context: ssl.SSLContext | None = None) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2, context=context) as answer:
            return answer.status == 200
    except (urllib.error.URLError, OSError):
        return False


def environment_problem() -> str | None:
    """What this machine lacks to run the control plane (openssl), in one line."""
    if shutil.which("openssl") is None:
        return "openssl is not on PATH (the tests make their certificates with it)"
    return None
