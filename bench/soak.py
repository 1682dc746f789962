"""Soak: a scheduler holding 10,000 pending gang pods on 2,000 nodes for several minutes,
with churn, while its RSS is sampled. Memory must stay bounded: the mean RSS of the last
quarter may not exceed the mean of the second quarter by more than 10 %.

    python -m bench.soak --minutes 5 --nodes 2000 --pods 10000 --out bench-results/soak
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

from coscheduling.cluster.client import ApiError, ClientSettings, KubeClient
from coscheduling.localcluster import LocalCluster, ensure_binaries

GROUP_LABEL = "group.batch.scheduler.tencent.com"


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def make_nodes(kube: KubeClient, count: int) -> None:
    def one(i: int) -> None:
        res = {"cpu": "8", "memory": "32Gi", "pods": "110"}
        node = kube.create("/api/v1/nodes", {"metadata": {"name": f"soak-{i}"},
                                             "status": {"capacity": res, "allocatable": res}})
        taints = [t for t in node.get("spec", {}).get("taints") or ()
                  if t.get("key") != "node.kubernetes.io/not-ready"]
        kube.patch(f"/api/v1/nodes/soak-{i}", {"spec": {"taints": taints or None}})

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(one, range(count)))


def make_gang(kube: KubeClient, namespace: str, name: str, size: int, cpu: str) -> None:
    kube.create(f"/apis/batch.scheduler.tencent.com/v1/namespaces/{namespace}/podgroups",
                {"apiVersion": "batch.scheduler.tencent.com/v1", "kind": "PodGroup",
                 "metadata": {"name": name}, "spec": {"minMember": size}})
    for i in range(size):
        kube.create(f"/api/v1/namespaces/{namespace}/pods", {
            "metadata": {"name": f"{name}-{i}", "labels": {GROUP_LABEL: name}},
            "spec": {"schedulerName": "batch-scheduler", "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "c", "image": "x",
                                     "resources": {"requests": {"cpu": cpu}}}]}})


def delete_gang(kube: KubeClient, namespace: str, name: str, size: int) -> None:
    for i in range(size):
        with contextlib.suppress(ApiError):
            kube.request("DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}-{i}",
                         body={"gracePeriodSeconds": 0})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--minutes", type=float, default=5)
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--pods", type=int, default=10000)
    parser.add_argument("--gang-size", type=int, default=10)
    parser.add_argument("--out", default="bench-results/soak")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(1)
    with tempfile.TemporaryDirectory(prefix="soak-") as tmp:
        cluster = LocalCluster(Path(tmp) / "cluster", binaries=ensure_binaries(),
                               controller_manager=False)
        cluster.start()
        kube = KubeClient(ClientSettings(kubeconfig=str(cluster.kubeconfig), qps=2000,
                                         burst=4000, connection_pool=32))
        process = None
        try:
            subprocess.run(["kubectl", "--kubeconfig", str(cluster.kubeconfig), "apply", "-f",
                            "crd/"], check=True, stdout=subprocess.DEVNULL)
            kube.create("/api/v1/namespaces", {"metadata": {"name": "soak"}})
            kube.create("/api/v1/namespaces/soak/serviceaccounts",
                        {"metadata": {"name": "default"}})
            print(f"creating {args.nodes} nodes", flush=True)
            make_nodes(kube, args.nodes)
            config = Path(tmp) / "config.yaml"
            config.write_text(yaml.safe_dump({
                "apiVersion": "config.batch.scheduler.tencent.com/v1",
                "kind": "SchedulerConfiguration", "metricsBindAddress": "127.0.0.1:0"}))
            process = subprocess.Popen(
                [sys.executable, "-m", "coscheduling", "run", "--kubeconfig",
                 str(cluster.kubeconfig), "--config", str(config)],
                stdout=(out / "scheduler.log").open("w"), stderr=subprocess.STDOUT)
            # Room: nodes x 8 cpu = 2 members of 4 cpu per node, 4,000 of the 10,000 pods
            # with the defaults; the rest stay pending, which is the point of the soak.
            gangs = args.pods // args.gang_size
            print(f"creating {gangs} gangs of {args.gang_size} ({args.pods} pods)", flush=True)
            with ThreadPoolExecutor(16) as pool:
                list(pool.map(lambda g: make_gang(kube, "soak", f"g{g}", args.gang_size, "4"),
                              range(gangs)))
            samples: list[tuple[float, int]] = []
            started = time.monotonic()
            next_gang = gangs
            while time.monotonic() - started < args.minutes * 60:
                samples.append((round(time.monotonic() - started, 1), rss_kib(process.pid)))
                victim = rng.randrange(next_gang)
                delete_gang(kube, "soak", f"g{victim}", args.gang_size)
                make_gang(kube, "soak", f"g{next_gang}", args.gang_size, "4")
                next_gang += 1
                time.sleep(5)
            quarter = max(1, len(samples) // 4)
            second = [r for _, r in samples[quarter:2 * quarter]] or [samples[0][1]]
            last = [r for _, r in samples[-quarter:]]
            growth = (sum(last) / len(last)) / (sum(second) / len(second))
            result = {"nodes": args.nodes, "pods": args.pods, "minutes": args.minutes,
                      "churned_gangs": next_gang - gangs, "rss_kib": samples,
                      "peak_rss_mib": max(r for _, r in samples) / 1024,
                      "last_quarter_over_second_quarter": round(growth, 3)}
            (out / "soak.json").write_text(json.dumps(result, indent=1))
            print(f"peak RSS {result['peak_rss_mib']:.0f} MiB; last quarter / second quarter "
                  f"= {growth:.3f}; {next_gang - gangs} gangs churned", flush=True)
            if growth > 1.10:
                print("FAIL: RSS kept growing", file=sys.stderr)
                return 1
            return 0
        finally:
            if process is not None:
                process.terminate()
                process.wait(timeout=30)
            kube.close()
            cluster.stop()


if __name__ == "__main__":
    sys.exit(main())
