"""``python -m coscheduling.localcluster``: build the control-plane binaries (once) before
the tests run, with progress on the terminal instead of inside a test's time limit."""

import sys

from coscheduling.localcluster.build import BuildError, ensure_binaries

try:
    built = ensure_binaries()
except BuildError as error:
    print(f"coscheduling: {error}", file=sys.stderr)
    sys.exit(1)
print(f"control-plane binaries ready: {built.kube_apiserver.parent}, {built.etcd.parent}")
