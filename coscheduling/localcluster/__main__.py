"""``python -m coscheduling.localcluster``: build the control-plane binaries, the kubelet,
containerd 1.7 and the DRA example driver of the real nodes, helm, the quantity checker,
the training-operator and the ray-operator (once) before the tests run, with progress on
the terminal instead of inside a test's time limit."""

import sys

from coscheduling.localcluster.build import (
    BuildError,
    ensure_binaries,
    ensure_containerd,
    ensure_dra_example_driver,
    ensure_helm,
    ensure_kubelet,
    ensure_quantitycheck,
)
from coscheduling.localcluster.kuberay import ensure_ray_operator
from coscheduling.localcluster.operators import ensure_training_operator

try:
    built = ensure_binaries()
    kubelet = ensure_kubelet()
    containerd = ensure_containerd()
    driver = ensure_dra_example_driver()
    helm = ensure_helm()
    quantitycheck = ensure_quantitycheck()
    operator = ensure_training_operator()
    ray = ensure_ray_operator()
except BuildError as error:
    print(f"coscheduling: {error}", file=sys.stderr)
    sys.exit(1)
print(f"control-plane binaries ready: {built.kube_apiserver.parent}, {built.etcd.parent}; "
      f"kubelet: {kubelet}; containerd: {containerd}; DRA example driver: {driver}; helm: "
      f"{helm}; quantitycheck: {quantitycheck}; training-operator: {operator.binary}; "
      f"ray-operator: {ray.binary}")
