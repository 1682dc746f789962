"""``python -m coscheduling.localcluster``: build the control-plane binaries, the kubelet of
the real nodes, the training-operator and the ray-operator (once) before the tests run,
with progress on the terminal instead of inside a test's time limit."""

import sys

from coscheduling.localcluster.build import BuildError, ensure_binaries, ensure_kubelet
from coscheduling.localcluster.kuberay import ensure_ray_operator
from coscheduling.localcluster.operators import ensure_training_operator

try:
    built = ensure_binaries()
    kubelet = ensure_kubelet()
    operator = ensure_training_operator()
    ray = ensure_ray_operator()
except BuildError as error:
    print(f"coscheduling: {error}", file=sys.stderr)
    sys.exit(1)
print(f"control-plane binaries ready: {built.kube_apiserver.parent}, {built.etcd.parent}; "
      f"kubelet: {kubelet}; training-operator: {operator.binary}; ray-operator: {ray.binary}")
