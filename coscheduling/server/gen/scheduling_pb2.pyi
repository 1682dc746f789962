# mypy: ignore-errors
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Code(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CODE_SUCCESS: _ClassVar[Code]
    CODE_ERROR: _ClassVar[Code]
    CODE_UNSCHEDULABLE: _ClassVar[Code]
    CODE_UNSCHEDULABLE_AND_UNRESOLVABLE: _ClassVar[Code]
    CODE_WAIT: _ClassVar[Code]
    CODE_SKIP: _ClassVar[Code]

class MemberState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MEMBER_STATE_UNSPECIFIED: _ClassVar[MemberState]
    MEMBER_STATE_PENDING: _ClassVar[MemberState]
    MEMBER_STATE_CLAIMED: _ClassVar[MemberState]
    MEMBER_STATE_WAITING: _ClassVar[MemberState]
    MEMBER_STATE_ASSUMED: _ClassVar[MemberState]
    MEMBER_STATE_BOUND: _ClassVar[MemberState]

class Verdict(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    VERDICT_UNSPECIFIED: _ClassVar[Verdict]
    FITS_NOW: _ClassVar[Verdict]
    FITS_AFTER_PREEMPTION: _ClassVar[Verdict]
    FITS_AFTER_RECLAIM: _ClassVar[Verdict]
    FITS_WHEN_ROOM_FREES: _ClassVar[Verdict]
    NEVER: _ClassVar[Verdict]
    FITS_ONCE_RESERVED: _ClassVar[Verdict]
    FITS_AFTER_SCALE_UP: _ClassVar[Verdict]
CODE_SUCCESS: Code
CODE_ERROR: Code
CODE_UNSCHEDULABLE: Code
CODE_UNSCHEDULABLE_AND_UNRESOLVABLE: Code
CODE_WAIT: Code
CODE_SKIP: Code
MEMBER_STATE_UNSPECIFIED: MemberState
MEMBER_STATE_PENDING: MemberState
MEMBER_STATE_CLAIMED: MemberState
MEMBER_STATE_WAITING: MemberState
MEMBER_STATE_ASSUMED: MemberState
MEMBER_STATE_BOUND: MemberState
VERDICT_UNSPECIFIED: Verdict
FITS_NOW: Verdict
FITS_AFTER_PREEMPTION: Verdict
FITS_AFTER_RECLAIM: Verdict
FITS_WHEN_ROOM_FREES: Verdict
NEVER: Verdict
FITS_ONCE_RESERVED: Verdict
FITS_AFTER_SCALE_UP: Verdict

class Status(_message.Message):
    __slots__ = ("code", "reasons", "plugin")
    CODE_FIELD_NUMBER: _ClassVar[int]
    REASONS_FIELD_NUMBER: _ClassVar[int]
    PLUGIN_FIELD_NUMBER: _ClassVar[int]
    code: Code
    reasons: _containers.RepeatedScalarFieldContainer[str]
    plugin: str
    def __init__(self, code: _Optional[_Union[Code, str]] = ..., reasons: _Optional[_Iterable[str]] = ..., plugin: _Optional[str] = ...) -> None: ...

class ObjectKey(_message.Message):
    __slots__ = ("namespace", "name")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    name: str
    def __init__(self, namespace: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class PodRef(_message.Message):
    __slots__ = ("pod_json", "key")
    POD_JSON_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    pod_json: bytes
    key: ObjectKey
    def __init__(self, pod_json: _Optional[bytes] = ..., key: _Optional[_Union[ObjectKey, _Mapping]] = ...) -> None: ...

class LessRequest(_message.Message):
    __slots__ = ("a", "b")
    A_FIELD_NUMBER: _ClassVar[int]
    B_FIELD_NUMBER: _ClassVar[int]
    a: PodRef
    b: PodRef
    def __init__(self, a: _Optional[_Union[PodRef, _Mapping]] = ..., b: _Optional[_Union[PodRef, _Mapping]] = ...) -> None: ...

class LessResponse(_message.Message):
    __slots__ = ("less",)
    LESS_FIELD_NUMBER: _ClassVar[int]
    less: bool
    def __init__(self, less: _Optional[bool] = ...) -> None: ...

class PreFilterRequest(_message.Message):
    __slots__ = ("pod",)
    POD_FIELD_NUMBER: _ClassVar[int]
    pod: PodRef
    def __init__(self, pod: _Optional[_Union[PodRef, _Mapping]] = ...) -> None: ...

class PreFilterResponse(_message.Message):
    __slots__ = ("status",)
    STATUS_FIELD_NUMBER: _ClassVar[int]
    status: Status
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ...) -> None: ...

class FilterRequest(_message.Message):
    __slots__ = ("pod", "node_names")
    POD_FIELD_NUMBER: _ClassVar[int]
    NODE_NAMES_FIELD_NUMBER: _ClassVar[int]
    pod: PodRef
    node_names: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, pod: _Optional[_Union[PodRef, _Mapping]] = ..., node_names: _Optional[_Iterable[str]] = ...) -> None: ...

class NodeStatus(_message.Message):
    __slots__ = ("node_name", "status")
    NODE_NAME_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    node_name: str
    status: Status
    def __init__(self, node_name: _Optional[str] = ..., status: _Optional[_Union[Status, _Mapping]] = ...) -> None: ...

class FilterResponse(_message.Message):
    __slots__ = ("nodes",)
    NODES_FIELD_NUMBER: _ClassVar[int]
    nodes: _containers.RepeatedCompositeFieldContainer[NodeStatus]
    def __init__(self, nodes: _Optional[_Iterable[_Union[NodeStatus, _Mapping]]] = ...) -> None: ...

class ScoreRequest(_message.Message):
    __slots__ = ("pod", "node_names")
    POD_FIELD_NUMBER: _ClassVar[int]
    NODE_NAMES_FIELD_NUMBER: _ClassVar[int]
    pod: PodRef
    node_names: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, pod: _Optional[_Union[PodRef, _Mapping]] = ..., node_names: _Optional[_Iterable[str]] = ...) -> None: ...

class NodeScore(_message.Message):
    __slots__ = ("node_name", "score")
    NODE_NAME_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    node_name: str
    score: int
    def __init__(self, node_name: _Optional[str] = ..., score: _Optional[int] = ...) -> None: ...

class ScoreResponse(_message.Message):
    __slots__ = ("scores",)
    SCORES_FIELD_NUMBER: _ClassVar[int]
    scores: _containers.RepeatedCompositeFieldContainer[NodeScore]
    def __init__(self, scores: _Optional[_Iterable[_Union[NodeScore, _Mapping]]] = ...) -> None: ...

class ReserveRequest(_message.Message):
    __slots__ = ("pod", "node_name")
    POD_FIELD_NUMBER: _ClassVar[int]
    NODE_NAME_FIELD_NUMBER: _ClassVar[int]
    pod: PodRef
    node_name: str
    def __init__(self, pod: _Optional[_Union[PodRef, _Mapping]] = ..., node_name: _Optional[str] = ...) -> None: ...

class ReserveResponse(_message.Message):
    __slots__ = ("status",)
    STATUS_FIELD_NUMBER: _ClassVar[int]
    status: Status
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ...) -> None: ...

class UnreserveRequest(_message.Message):
    __slots__ = ("pod", "node_name")
    POD_FIELD_NUMBER: _ClassVar[int]
    NODE_NAME_FIELD_NUMBER: _ClassVar[int]
    pod: PodRef
    node_name: str
    def __init__(self, pod: _Optional[_Union[PodRef, _Mapping]] = ..., node_name: _Optional[str] = ...) -> None: ...

class UnreserveResponse(_message.Message):
    __slots__ = ("unreserved",)
    UNRESERVED_FIELD_NUMBER: _ClassVar[int]
    unreserved: bool
    def __init__(self, unreserved: _Optional[bool] = ...) -> None: ...

class PermitRequest(_message.Message):
    __slots__ = ("pod", "node_name")
    POD_FIELD_NUMBER: _ClassVar[int]
    NODE_NAME_FIELD_NUMBER: _ClassVar[int]
    pod: PodRef
    node_name: str
    def __init__(self, pod: _Optional[_Union[PodRef, _Mapping]] = ..., node_name: _Optional[str] = ...) -> None: ...

class PermitResponse(_message.Message):
    __slots__ = ("allow", "wait", "unschedulable", "status")
    class Allow(_message.Message):
        __slots__ = ()
        def __init__(self) -> None: ...
    class Wait(_message.Message):
        __slots__ = ("timeout_seconds", "reason")
        TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
        REASON_FIELD_NUMBER: _ClassVar[int]
        timeout_seconds: float
        reason: str
        def __init__(self, timeout_seconds: _Optional[float] = ..., reason: _Optional[str] = ...) -> None: ...
    class Unschedulable(_message.Message):
        __slots__ = ("reason",)
        REASON_FIELD_NUMBER: _ClassVar[int]
        reason: str
        def __init__(self, reason: _Optional[str] = ...) -> None: ...
    ALLOW_FIELD_NUMBER: _ClassVar[int]
    WAIT_FIELD_NUMBER: _ClassVar[int]
    UNSCHEDULABLE_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    allow: PermitResponse.Allow
    wait: PermitResponse.Wait
    unschedulable: PermitResponse.Unschedulable
    status: Status
    def __init__(self, allow: _Optional[_Union[PermitResponse.Allow, _Mapping]] = ..., wait: _Optional[_Union[PermitResponse.Wait, _Mapping]] = ..., unschedulable: _Optional[_Union[PermitResponse.Unschedulable, _Mapping]] = ..., status: _Optional[_Union[Status, _Mapping]] = ...) -> None: ...

class PostBindRequest(_message.Message):
    __slots__ = ("pod", "node_name")
    POD_FIELD_NUMBER: _ClassVar[int]
    NODE_NAME_FIELD_NUMBER: _ClassVar[int]
    pod: PodRef
    node_name: str
    def __init__(self, pod: _Optional[_Union[PodRef, _Mapping]] = ..., node_name: _Optional[str] = ...) -> None: ...

class PostBindResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ScheduleRequest(_message.Message):
    __slots__ = ("pod",)
    POD_FIELD_NUMBER: _ClassVar[int]
    pod: PodRef
    def __init__(self, pod: _Optional[_Union[PodRef, _Mapping]] = ...) -> None: ...

class ScheduleResponse(_message.Message):
    __slots__ = ("node_name", "allow", "wait", "unschedulable", "status", "nodes")
    NODE_NAME_FIELD_NUMBER: _ClassVar[int]
    ALLOW_FIELD_NUMBER: _ClassVar[int]
    WAIT_FIELD_NUMBER: _ClassVar[int]
    UNSCHEDULABLE_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    node_name: str
    allow: PermitResponse.Allow
    wait: PermitResponse.Wait
    unschedulable: PermitResponse.Unschedulable
    status: Status
    nodes: _containers.RepeatedCompositeFieldContainer[NodeStatus]
    def __init__(self, node_name: _Optional[str] = ..., allow: _Optional[_Union[PermitResponse.Allow, _Mapping]] = ..., wait: _Optional[_Union[PermitResponse.Wait, _Mapping]] = ..., unschedulable: _Optional[_Union[PermitResponse.Unschedulable, _Mapping]] = ..., status: _Optional[_Union[Status, _Mapping]] = ..., nodes: _Optional[_Iterable[_Union[NodeStatus, _Mapping]]] = ...) -> None: ...

class WatchDecisionsRequest(_message.Message):
    __slots__ = ("group",)
    GROUP_FIELD_NUMBER: _ClassVar[int]
    group: ObjectKey
    def __init__(self, group: _Optional[_Union[ObjectKey, _Mapping]] = ...) -> None: ...

class Decision(_message.Message):
    __slots__ = ("pod", "pod_uid", "node_name", "group", "allowed", "reason", "plugin", "waited_seconds")
    POD_FIELD_NUMBER: _ClassVar[int]
    POD_UID_FIELD_NUMBER: _ClassVar[int]
    NODE_NAME_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    ALLOWED_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    PLUGIN_FIELD_NUMBER: _ClassVar[int]
    WAITED_SECONDS_FIELD_NUMBER: _ClassVar[int]
    pod: ObjectKey
    pod_uid: str
    node_name: str
    group: ObjectKey
    allowed: bool
    reason: str
    plugin: str
    waited_seconds: float
    def __init__(self, pod: _Optional[_Union[ObjectKey, _Mapping]] = ..., pod_uid: _Optional[str] = ..., node_name: _Optional[str] = ..., group: _Optional[_Union[ObjectKey, _Mapping]] = ..., allowed: _Optional[bool] = ..., reason: _Optional[str] = ..., plugin: _Optional[str] = ..., waited_seconds: _Optional[float] = ...) -> None: ...

class GetPodGroupRequest(_message.Message):
    __slots__ = ("group",)
    GROUP_FIELD_NUMBER: _ClassVar[int]
    group: ObjectKey
    def __init__(self, group: _Optional[_Union[ObjectKey, _Mapping]] = ...) -> None: ...

class Member(_message.Message):
    __slots__ = ("name", "node", "state")
    NAME_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    name: str
    node: str
    state: MemberState
    def __init__(self, name: _Optional[str] = ..., node: _Optional[str] = ..., state: _Optional[_Union[MemberState, str]] = ...) -> None: ...

class GetPodGroupResponse(_message.Message):
    __slots__ = ("group", "min_member", "members", "waiting", "bound", "claimed", "placed", "phase", "frozen_until", "attempt_deadline", "last_rejection_reason", "attempts", "timeouts", "rejections", "errors")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    MIN_MEMBER_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    WAITING_FIELD_NUMBER: _ClassVar[int]
    BOUND_FIELD_NUMBER: _ClassVar[int]
    CLAIMED_FIELD_NUMBER: _ClassVar[int]
    PLACED_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    FROZEN_UNTIL_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_DEADLINE_FIELD_NUMBER: _ClassVar[int]
    LAST_REJECTION_REASON_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUTS_FIELD_NUMBER: _ClassVar[int]
    REJECTIONS_FIELD_NUMBER: _ClassVar[int]
    ERRORS_FIELD_NUMBER: _ClassVar[int]
    group: ObjectKey
    min_member: int
    members: _containers.RepeatedCompositeFieldContainer[Member]
    waiting: int
    bound: int
    claimed: int
    placed: int
    phase: str
    frozen_until: float
    attempt_deadline: float
    last_rejection_reason: str
    attempts: int
    timeouts: int
    rejections: int
    errors: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, group: _Optional[_Union[ObjectKey, _Mapping]] = ..., min_member: _Optional[int] = ..., members: _Optional[_Iterable[_Union[Member, _Mapping]]] = ..., waiting: _Optional[int] = ..., bound: _Optional[int] = ..., claimed: _Optional[int] = ..., placed: _Optional[int] = ..., phase: _Optional[str] = ..., frozen_until: _Optional[float] = ..., attempt_deadline: _Optional[float] = ..., last_rejection_reason: _Optional[str] = ..., attempts: _Optional[int] = ..., timeouts: _Optional[int] = ..., rejections: _Optional[int] = ..., errors: _Optional[_Iterable[str]] = ...) -> None: ...

class SimulateRequest(_message.Message):
    __slots__ = ("manifest", "namespace")
    MANIFEST_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    manifest: bytes
    namespace: str
    def __init__(self, manifest: _Optional[bytes] = ..., namespace: _Optional[str] = ...) -> None: ...

class Placement(_message.Message):
    __slots__ = ("pod", "node")
    POD_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    pod: str
    node: str
    def __init__(self, pod: _Optional[str] = ..., node: _Optional[str] = ...) -> None: ...

class ResourceShortfall(_message.Message):
    __slots__ = ("resource", "need", "free", "allocatable", "text")
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    NEED_FIELD_NUMBER: _ClassVar[int]
    FREE_FIELD_NUMBER: _ClassVar[int]
    ALLOCATABLE_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    resource: str
    need: int
    free: int
    allocatable: int
    text: str
    def __init__(self, resource: _Optional[str] = ..., need: _Optional[int] = ..., free: _Optional[int] = ..., allocatable: _Optional[int] = ..., text: _Optional[str] = ...) -> None: ...

class DomainShortfall(_message.Message):
    __slots__ = ("domain", "fit_now", "fit_empty", "need")
    DOMAIN_FIELD_NUMBER: _ClassVar[int]
    FIT_NOW_FIELD_NUMBER: _ClassVar[int]
    FIT_EMPTY_FIELD_NUMBER: _ClassVar[int]
    NEED_FIELD_NUMBER: _ClassVar[int]
    domain: str
    fit_now: int
    fit_empty: int
    need: int
    def __init__(self, domain: _Optional[str] = ..., fit_now: _Optional[int] = ..., fit_empty: _Optional[int] = ..., need: _Optional[int] = ...) -> None: ...

class SimulateResponse(_message.Message):
    __slots__ = ("verdict", "source", "group", "min_member", "pods", "placements", "domain", "victims", "reason", "need", "fit_now", "fit_empty", "shortfall", "domains", "nodes_needed", "notes", "reserve_nodes", "reservations_ahead", "estimated_start")
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    MIN_MEMBER_FIELD_NUMBER: _ClassVar[int]
    PODS_FIELD_NUMBER: _ClassVar[int]
    PLACEMENTS_FIELD_NUMBER: _ClassVar[int]
    DOMAIN_FIELD_NUMBER: _ClassVar[int]
    VICTIMS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    NEED_FIELD_NUMBER: _ClassVar[int]
    FIT_NOW_FIELD_NUMBER: _ClassVar[int]
    FIT_EMPTY_FIELD_NUMBER: _ClassVar[int]
    SHORTFALL_FIELD_NUMBER: _ClassVar[int]
    DOMAINS_FIELD_NUMBER: _ClassVar[int]
    NODES_NEEDED_FIELD_NUMBER: _ClassVar[int]
    NOTES_FIELD_NUMBER: _ClassVar[int]
    RESERVE_NODES_FIELD_NUMBER: _ClassVar[int]
    RESERVATIONS_AHEAD_FIELD_NUMBER: _ClassVar[int]
    ESTIMATED_START_FIELD_NUMBER: _ClassVar[int]
    verdict: Verdict
    source: str
    group: str
    min_member: int
    pods: int
    placements: _containers.RepeatedCompositeFieldContainer[Placement]
    domain: str
    victims: _containers.RepeatedCompositeFieldContainer[ObjectKey]
    reason: str
    need: int
    fit_now: int
    fit_empty: int
    shortfall: _containers.RepeatedCompositeFieldContainer[ResourceShortfall]
    domains: _containers.RepeatedCompositeFieldContainer[DomainShortfall]
    nodes_needed: str
    notes: _containers.RepeatedScalarFieldContainer[str]
    reserve_nodes: _containers.RepeatedScalarFieldContainer[str]
    reservations_ahead: _containers.RepeatedScalarFieldContainer[str]
    estimated_start: float
    def __init__(self, verdict: _Optional[_Union[Verdict, str]] = ..., source: _Optional[str] = ..., group: _Optional[str] = ..., min_member: _Optional[int] = ..., pods: _Optional[int] = ..., placements: _Optional[_Iterable[_Union[Placement, _Mapping]]] = ..., domain: _Optional[str] = ..., victims: _Optional[_Iterable[_Union[ObjectKey, _Mapping]]] = ..., reason: _Optional[str] = ..., need: _Optional[int] = ..., fit_now: _Optional[int] = ..., fit_empty: _Optional[int] = ..., shortfall: _Optional[_Iterable[_Union[ResourceShortfall, _Mapping]]] = ..., domains: _Optional[_Iterable[_Union[DomainShortfall, _Mapping]]] = ..., nodes_needed: _Optional[str] = ..., notes: _Optional[_Iterable[str]] = ..., reserve_nodes: _Optional[_Iterable[str]] = ..., reservations_ahead: _Optional[_Iterable[str]] = ..., estimated_start: _Optional[float] = ...) -> None: ...
