"""Whole-gang scale-up through the cluster-autoscaler's ProvisioningRequest API, and the
node annotation that keeps the autoscaler from removing a node a gang is placed on.

A gang that does not fit asks for all it is missing in one request (never one pod at a
time), and its members carry the annotations with which the autoscaler leaves them to
that request instead of scaling up for each of them alone.
"""
