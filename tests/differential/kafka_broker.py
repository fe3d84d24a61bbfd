"""Apache Kafka 4.4 as a test peer: a KRaft cluster of combined broker+controller nodes on
free loopback ports, formatted and started from the jars scripts/kafka.sh fetched, with the
JVM options of Kafka's own kafka-server-start.sh. Used by the differential suite and, through
`scripts/kafka.sh start|stop DIR`, by hand. It only starts and stops Kafka: what is sent to it
is the callers' business.
"""

import argparse
import base64
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid

# Kafka's start-up is about 7 s on this machine; a loaded one may take several times that.
START_TIMEOUT_S = 120
STOP_TIMEOUT_S = 60
# bin/kafka-server-start.sh's heap and bin/kafka-run-class.sh's GC options.
JVM_OPTS = [
    "-Xmx1G", "-Xms1G", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent",
    "-XX:MaxInlineLevel=15", "-Djava.awt.headless=true",
]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def kafka_uuid():
    """A Uuid as Kafka prints it (URL-safe base64 of 16 bytes), never starting with '-'."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


class KafkaCluster:
    """NODES Kafka nodes in DIR/node-N, each its own JVM. `bootstrap` names every broker."""

    def __init__(self, lib, work, nodes=1, java="java", overrides=None, ssl_port=None):
        self.lib = lib
        self.work = os.path.abspath(work)
        self.nodes = nodes
        self.java = java
        self.overrides = dict(overrides or {})
        # A listener named SSL on this port too (one node only); its keystore is the
        # overrides' listener.name.ssl.* settings.
        self.ssl_port = ssl_port
        assert ssl_port is None or nodes == 1
        self.procs = {}
        self.ports = {}

    @property
    def bootstrap(self):
        return ",".join(f"127.0.0.1:{b}" for b, _ in self.ports.values())

    def _classpath(self):
        return os.path.join(self.lib, "*")

    def _node_dir(self, node):
        return os.path.join(self.work, f"node-{node}")

    def _properties(self, node, voters):
        broker_port, controller_port = self.ports[node]
        props = {
            "process.roles": "broker,controller",
            "node.id": str(node),
            "controller.quorum.voters": voters,
            "listeners": f"PLAINTEXT://127.0.0.1:{broker_port},CONTROLLER://127.0.0.1:{controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{broker_port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": os.path.join(self._node_dir(node), "data"),
            "offsets.topic.replication.factor": str(min(self.nodes, 3)),
            "transaction.state.log.replication.factor": str(min(self.nodes, 3)),
            "transaction.state.log.min.isr": str(min(self.nodes, 2)),
            "share.coordinator.state.topic.replication.factor": str(min(self.nodes, 3)),
            "share.coordinator.state.topic.min.isr": str(min(self.nodes, 2)),
            "group.initial.rebalance.delay.ms": "0",
        }
        if self.ssl_port:
            props["listeners"] += f",SSL://127.0.0.1:{self.ssl_port}"
            props["advertised.listeners"] += f",SSL://127.0.0.1:{self.ssl_port}"
            props["listener.security.protocol.map"] += ",SSL:SSL"
        props.update(self.overrides)
        return props

    def start(self):
        os.makedirs(self.work, exist_ok=True)
        for node in range(1, self.nodes + 1):
            self.ports[node] = (free_port(), free_port())
        voters = ",".join(f"{n}@127.0.0.1:{c}" for n, (_, c) in self.ports.items())
        cluster_id = kafka_uuid()
        for node in self.ports:
            d = self._node_dir(node)
            os.makedirs(os.path.join(d, "logs"), exist_ok=True)
            conf = os.path.join(d, "server.properties")
            with open(conf, "w") as f:
                for k, v in self._properties(node, voters).items():
                    f.write(f"{k}={v}\n")
            subprocess.run(
                [self.java, "-Xmx256M",
                 f"-Dlog4j2.configurationFile={self.lib}/log4j2-tools.properties",
                 "-cp", self._classpath(), "kafka.tools.StorageTool", "format",
                 "-t", cluster_id, "-c", conf],
                check=True, stdout=subprocess.DEVNULL)
        for node in self.ports:
            self._launch(node)
        deadline = time.time() + START_TIMEOUT_S
        for node in self.ports:
            self._wait_started(node, deadline)
        self._save()
        return self

    def _launch(self, node):
        d = self._node_dir(node)
        logs = os.path.join(d, "logs")
        out = open(os.path.join(logs, "stdout.log"), "ab")
        self.procs[node] = subprocess.Popen(
            [self.java, *JVM_OPTS, f"-Dkafka.logs.dir={logs}",
             f"-Dlog4j2.configurationFile={self.lib}/log4j2-broker.properties",
             "-cp", self._classpath(), "kafka.Kafka", os.path.join(d, "server.properties")],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def _wait_started(self, node, deadline):
        log = os.path.join(self._node_dir(node), "logs", "server.log")
        while time.time() < deadline:
            proc = self.procs[node]
            if proc.poll() is not None:
                raise RuntimeError(f"Kafka node {node} exited with {proc.returncode}: see {log}")
            try:
                with open(log, errors="replace") as f:
                    if "Kafka Server started" in f.read():
                        return
            except FileNotFoundError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"Kafka node {node} did not start in {START_TIMEOUT_S} s: see {log}")

    def kill(self, node, sig=signal.SIGKILL):
        proc = self.procs.pop(node, None)
        if proc and proc.poll() is None:
            proc.send_signal(sig)
            proc.wait(timeout=STOP_TIMEOUT_S)

    def restart(self, node):
        self._launch(node)
        self._wait_started(node, time.time() + START_TIMEOUT_S)

    def stop(self):
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        for node, proc in list(self.procs.items()):
            try:
                proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs.clear()

    def _save(self):
        with open(os.path.join(self.work, "cluster.json"), "w") as f:
            json.dump({"bootstrap": self.bootstrap,
                       "pids": {n: p.pid for n, p in self.procs.items()}}, f)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("command", choices=["start", "stop"])
    ap.add_argument("--lib", required=True, help="the directory of Kafka's jars")
    ap.add_argument("dir")
    ap.add_argument("nodes", nargs="?", type=int, default=1)
    args = ap.parse_args()
    if args.command == "start":
        cluster = KafkaCluster(args.lib, args.dir, args.nodes).start()
        print(cluster.bootstrap)
        return
    with open(os.path.join(args.dir, "cluster.json")) as f:
        pids = json.load(f)["pids"].values()
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.time() + STOP_TIMEOUT_S
    for pid in pids:
        while time.time() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.2)
        else:
            os.kill(pid, signal.SIGKILL)


if __name__ == "__main__":
    sys.exit(main())
