"""The plugins built into this scheduler, by name."""

from __future__ import annotations

from coscheduling.framework.registry import Registry
from coscheduling.plugins import coscheduling as gang
from coscheduling.plugins.defaultbinder import DefaultBinder
from coscheduling.plugins.defaultpreemption import DefaultPreemption
from coscheduling.plugins.drf import DRF
from coscheduling.plugins.dynamicresources import DynamicResources
from coscheduling.plugins.ganglocality import GangLocality
from coscheduling.plugins.imagelocality import ImageLocality
from coscheduling.plugins.interpodaffinity import InterPodAffinity
from coscheduling.plugins.interpodaffinity import validate_args as affinity_args
from coscheduling.plugins.nodeaffinity import NodeAffinity
from coscheduling.plugins.nodename import NodeName
from coscheduling.plugins.nodeports import NodePorts
from coscheduling.plugins.noderesources import NodeResourcesFit
from coscheduling.plugins.noderesources import validate_args as fit_args
from coscheduling.plugins.noderesources.balanced import NodeResourcesBalancedAllocation
from coscheduling.plugins.noderesources.balanced import validate_args as balanced_args
from coscheduling.plugins.nodeunschedulable import NodeUnschedulable
from coscheduling.plugins.nodevolumelimits import NodeVolumeLimits
from coscheduling.plugins.podtopologyspread import PodTopologySpread
from coscheduling.plugins.podtopologyspread import validate_args as spread_args
from coscheduling.plugins.prioritysort import PrioritySort
from coscheduling.plugins.proportion import Proportion
from coscheduling.plugins.tainttoleration import TaintToleration
from coscheduling.plugins.unsupported import UnsupportedFields
from coscheduling.plugins.volumebinding import VolumeBinding
from coscheduling.plugins.volumebinding import validate_args as volume_binding_args
from coscheduling.plugins.volumerestrictions import VolumeRestrictions
from coscheduling.plugins.volumezone import VolumeZone


def default_registry() -> Registry:
    registry = Registry()
    registry.register(gang.Coscheduling.name, gang.Coscheduling, gang.validate_args)
    registry.register(NodeResourcesFit.name, NodeResourcesFit, fit_args)
    registry.register(NodeResourcesBalancedAllocation.name, NodeResourcesBalancedAllocation,
                      balanced_args)
    registry.register(ImageLocality.name, ImageLocality)
    registry.register(InterPodAffinity.name, InterPodAffinity, affinity_args)
    registry.register(PodTopologySpread.name, PodTopologySpread, spread_args)
    registry.register(UnsupportedFields.name, UnsupportedFields)
    registry.register(VolumeBinding.name, VolumeBinding, volume_binding_args)
    for plugin in (DefaultBinder, DefaultPreemption, GangLocality, NodeAffinity, NodeName,
                   NodePorts, NodeUnschedulable, NodeVolumeLimits, PrioritySort,
                   TaintToleration, VolumeRestrictions, VolumeZone, Proportion, DRF,
                   DynamicResources):
        registry.register(plugin.name, plugin)
    return registry
