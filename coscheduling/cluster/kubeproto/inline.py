"""(message, field) of the embedded Go structs JSON writes inline, from proto/k8s.io/INLINE
by `make proto`: do not edit."""

INLINE: frozenset[tuple[str, str]] = frozenset({
    ('k8s.io.api.core.v1.ConfigMapEnvSource', 'localObjectReference'),
    ('k8s.io.api.core.v1.ConfigMapKeySelector', 'localObjectReference'),
    ('k8s.io.api.core.v1.ConfigMapProjection', 'localObjectReference'),
    ('k8s.io.api.core.v1.ConfigMapVolumeSource', 'localObjectReference'),
    ('k8s.io.api.core.v1.EphemeralContainer', 'ephemeralContainerCommon'),
    ('k8s.io.api.core.v1.PersistentVolumeSpec', 'persistentVolumeSource'),
    ('k8s.io.api.core.v1.Probe', 'handler'),
    ('k8s.io.api.core.v1.SecretEnvSource', 'localObjectReference'),
    ('k8s.io.api.core.v1.SecretKeySelector', 'localObjectReference'),
    ('k8s.io.api.core.v1.SecretProjection', 'localObjectReference'),
    ('k8s.io.api.core.v1.Volume', 'volumeSource'),
    ('k8s.io.api.resource.v1.DeviceAllocationConfiguration', 'deviceConfiguration'),
    ('k8s.io.api.resource.v1.DeviceClaimConfiguration', 'deviceConfiguration'),
    ('k8s.io.api.resource.v1.DeviceClassConfiguration', 'deviceConfiguration'),
    ('k8s.io.apimachinery.pkg.runtime.Unknown', 'typeMeta'),
})
