"""coscheduling: an all-or-nothing gang scheduler for Kubernetes.

Pods labelled ``group.batch.scheduler.tencent.com: <group>`` are scheduled together with
the other members of their PodGroup (``batch.scheduler.tencent.com/v1``): either at least
``minMember`` of them are bound at once, or none is.
"""

__version__ = "0.1.0"

GROUP_API = "batch.scheduler.tencent.com"
GROUP_VERSION = "v1"
GROUP_LABEL = "group.batch.scheduler.tencent.com"
DEFAULT_SCHEDULER_NAME = "batch-scheduler"
