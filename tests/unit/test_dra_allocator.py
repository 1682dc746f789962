"""The DRA allocator and its CEL selectors (issue 25): random slices and claims give only
valid allocations, never a device twice, and an allocation whenever one exists."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coscheduling.api.dra import (
    ALL,
    EXACT_COUNT,
    Constraint,
    Device,
    DeviceStore,
    ResourceClaim,
    Subrequest,
    parse_resource_claim,
    parse_resource_slice,
    quantity_value,
)
from coscheduling.api.podgroups import parse_podgroup
from coscheduling.api.quantity import parse_quantity
from coscheduling.plugins.dynamicresources.allocator import Allocator
from coscheduling.plugins.dynamicresources.cel import compile_selector
from coscheduling.plugins.dynamicresources.devices import build_index

DRIVER = "gpu.example.com"
SELECTORS = [
    "",
    f'device.attributes["{DRIVER}"].numa == 0',
    f'device.capacity["{DRIVER}"].memory.compareTo(quantity("40Gi")) > 0',
    f'device.attributes["{DRIVER}"].model == "a100"',
]


def _device(index: int, numa: int, memory: int, model: str) -> Device:
    return Device(DRIVER, "n1", f"d{index}", {DRIVER: {"numa": numa, "model": model}},
                  {DRIVER: {"memory": quantity_value(parse_quantity(f"{memory}Gi"))}})


devices_st = st.lists(st.tuples(st.integers(0, 1), st.sampled_from([40, 80]),
                                st.sampled_from(["a100", "h100"])), min_size=0, max_size=6)
request_st = st.tuples(st.sampled_from(SELECTORS), st.sampled_from([EXACT_COUNT, ALL]),
                       st.integers(1, 2))
claim_st = st.tuples(st.lists(request_st, min_size=1, max_size=2), st.booleans())


def _claim(index: int, raw: tuple[list[tuple[str, str, int]], bool]) -> ResourceClaim:
    requests, numa_together = raw
    parsed = parse_resource_claim({
        "metadata": {"namespace": "ns", "name": f"c{index}"},
        "spec": {"devices": {
            "requests": [{"name": f"r{i}", "exactly": {
                "deviceClassName": "gpu", "allocationMode": mode,
                **({"count": count} if mode == EXACT_COUNT else {}),
                **({"selectors": [{"cel": {"expression": sel}}]} if sel else {})}}
                for i, (sel, mode, count) in enumerate(requests)],
            "constraints": [{"matchAttribute": f"{DRIVER}/numa"}] if numa_together else []}}})
    assert not parsed.parse_error, parsed.parse_error
    return parsed


def _matches(claim: ResourceClaim, sub: Subrequest, device: Device) -> bool:
    return all(compile_selector(s).matches(device) for s in sub.selectors)


def _valid(claims: list[ResourceClaim], devices: list[Device],
           found: dict[str, list[Any]]) -> None:
    by_name = {d.name: d for d in devices}
    seen: set[str] = set()
    for claim in claims:
        results = found[claim.key]
        for request in claim.requests:
            (sub,) = request.alternatives
            mine = [by_name[r.device] for r in results if r.request == sub.name]
            assert all(_matches(claim, sub, d) for d in mine)
            matching = [d for d in devices if _matches(claim, sub, d)]
            assert len(mine) == (len(matching) if sub.mode == ALL else sub.count)
        for constraint in claim.constraints:
            values = {by_name[r.device].attribute(constraint.attribute) for r in results}
            assert len(values) <= 1
        names = [r.device for r in results]
        assert not seen & set(names) and len(set(names)) == len(names), "a device twice"
        seen.update(names)


def _exists(claims: list[ResourceClaim], devices: list[Device]) -> bool:
    """Brute force: some assignment of distinct devices meets every request."""
    slots = [(c, sub) for c in claims for r in c.requests for sub in r.alternatives]
    needs = [len(devices) if sub.mode == ALL else sub.count for _, sub in slots]
    if sum(needs) > len(devices) and all(s.mode != ALL for _, s in slots):
        return False
    for order in itertools.permutations(range(len(devices))):
        at, ok, chosen = 0, True, {}
        for (claim, sub), need in zip(slots, needs, strict=True):
            if sub.mode == ALL:
                picked = [d for d in devices if _matches(claim, sub, d)]
                if not picked or any(devices.index(d) in order[:at] for d in picked):
                    ok = False
                    break
                chosen.setdefault(claim.key, []).extend(picked)
                continue
            picked = [devices[i] for i in order[at:at + need]]
            at += need
            if len(picked) < need or not all(_matches(claim, sub, d) for d in picked):
                ok = False
                break
            chosen.setdefault(claim.key, []).extend(picked)
        if ok and _constraints_hold(claims, chosen) and _distinct(chosen):
            return True
    return False


def _distinct(chosen: dict[str, list[Device]]) -> bool:
    names = [d.name for ds in chosen.values() for d in ds]
    return len(names) == len(set(names))


def _constraints_hold(claims: list[ResourceClaim], chosen: dict[str, list[Device]]) -> bool:
    for claim in claims:
        for constraint in claim.constraints:
            if len({d.attribute(constraint.attribute) for d in chosen.get(claim.key, [])}) > 1:
                return False
    return True


@settings(max_examples=300, deadline=None)
@given(devices_st, st.lists(claim_st, min_size=1, max_size=2))
def test_random_claims_get_valid_allocations_and_never_a_device_twice(
        raw_devices: list[tuple[int, int, str]],
        raw_claims: list[tuple[list[tuple[str, str, int]], bool]]) -> None:
    devices = [_device(i, *spec) for i, spec in enumerate(raw_devices)]
    claims = [_claim(i, raw) for i, raw in enumerate(raw_claims)]
    found = Allocator(devices, set(), _matches).allocate(claims)
    if found is not None:
        _valid(claims, devices, found)
    if len(devices) <= 5:
        assert (found is not None) == _exists(claims, devices)


def test_taken_devices_are_never_given() -> None:
    devices = [_device(i, 0, 80, "a100") for i in range(3)]
    claim = _claim(0, ([("", EXACT_COUNT, 2)], False))
    taken = {devices[0].id, devices[2].id}
    assert Allocator(devices, taken, _matches).allocate([claim]) is None
    found = Allocator(devices, {devices[0].id}, _matches).allocate([claim])
    assert found is not None and [r.device for r in found[claim.key]] == ["d1", "d2"]


def test_backtracking_gives_the_small_device_to_the_small_request() -> None:
    devices = [_device(0, 0, 80, "a100"), _device(1, 0, 40, "a100")]
    small = _claim(0, ([(SELECTORS[0], EXACT_COUNT, 1)], False))
    big = _claim(1, ([(SELECTORS[2], EXACT_COUNT, 1)], False))
    found = Allocator(devices, set(), _matches).allocate([small, big])
    assert found is not None
    assert [r.device for r in found[small.key]] == ["d1"]
    assert [r.device for r in found[big.key]] == ["d0"]


def test_first_available_takes_the_first_alternative_that_fits() -> None:
    claim = parse_resource_claim({"metadata": {"namespace": "ns", "name": "c"}, "spec": {
        "devices": {"requests": [{"name": "gpu", "firstAvailable": [
            {"name": "two", "deviceClassName": "gpu", "count": 2},
            {"name": "one", "deviceClassName": "gpu", "count": 1}]}]}}})
    found = Allocator([_device(0, 0, 80, "a100")], set(), _matches).allocate([claim])
    assert found is not None and [r.request for r in found[claim.key]] == ["gpu/one"]


def test_kubernetes_cel_functions() -> None:
    device = _device(0, 1, 80, "a100")
    device.attributes[DRIVER]["version"] = {"__semver__": [1, 2, 3], "pre": ""}  # type: ignore[index]
    for text, expected in [
        (f'device.capacity["{DRIVER}"].memory.isGreaterThan(quantity("79Gi"))', True),
        (f'device.capacity["{DRIVER}"].memory.isLessThan(quantity("1Ti"))', True),
        (f'device.capacity["{DRIVER}"].memory.asInteger() == {80 << 30}', True),
        ('quantity("1") == quantity("1000m")', True),
        ('quantity("1500m").isInteger()', False),
        (f'device.attributes["{DRIVER}"].version.isGreaterThan(semver("1.2.3-rc.1"))', True),
        (f'device.attributes["{DRIVER}"].version.major() == 1', True),
        ('semver("1.10.0").compareTo(semver("1.9.0")) == 1', True),
        ('isSemver("1.2") || isQuantity("5Gi")', True),
    ]:
        compiled = compile_selector(text)
        assert not compiled.error, (text, compiled.error)
        assert compiled.matches(device) is expected, text


def test_cel_compile_and_runtime_errors() -> None:
    assert "undeclared reference to 'nope'" in compile_selector("nope(1)").error
    assert "not bool" in compile_selector("1 + 2").error
    missing = compile_selector(f'device.attributes["{DRIVER}"].missing == 1')
    try:
        missing.matches(_device(0, 0, 40, "a100"))
    except Exception as err:  # CelRuntimeError: the device does not match
        assert "missing" in str(err)
    else:
        raise AssertionError("a missing attribute must be a runtime error")


def test_slice_and_claim_fields_not_implemented_are_named() -> None:
    piece = parse_resource_slice({"metadata": {"name": "s"}, "spec": {
        "driver": DRIVER, "nodeName": "n1", "pool": {"name": "p", "generation": 1},
        "devices": [{"name": "a", "taints": [{"key": "k", "effect": "NoSchedule"}]},
                    {"name": "b", "attributes": {"numa": {"int": 0}}}]}})
    assert piece.devices[0].unusable == "spec.devices[0].taints"
    assert piece.devices[1].attribute(f"{DRIVER}/numa") == 0
    claim = parse_resource_claim({"metadata": {"namespace": "ns", "name": "c"}, "spec": {
        "devices": {"requests": [{"name": "r", "exactly": {
            "deviceClassName": "gpu", "tolerations": [{"operator": "Exists"}]}}]}}})
    assert claim.unsupported == "spec.devices.requests[0].exactly.tolerations"
    bad = parse_resource_claim({"metadata": {"namespace": "ns", "name": "c"}, "spec": {
        "devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "gpu",
                                                           "count": 0}}]}}})
    assert bad.parse_error == "spec.devices.requests[0].exactly.count: must be an integer >= 1"
    assert Constraint(("r",), "x").applies("r/sub")


@pytest.mark.parametrize(("constraints", "message"), [
    ({"matchAttribute": "x.example.com/clique"}, "spec.deviceConstraints: must be a list"),
    ([{"matchAttribute": "clique"}],
     "spec.deviceConstraints[0].matchAttribute: must be a fully qualified device attribute"),
    ([{"matchAttribute": "x.example.com/clique", "scope": "node"}],
     "spec.deviceConstraints[0].scope: unknown field"),
    ([{"matchAttribute": "x.example.com/clique", "deviceClassNames": "gpu"}],
     "spec.deviceConstraints[0].deviceClassNames: must be a list of DeviceClass names"),
    ([{"matchAttribute": "x.example.com/a"}] * 9, "spec.deviceConstraints: at most 8"),
])
def test_gang_device_constraints_validation_names_the_field(constraints: object,
                                                            message: str) -> None:
    group = parse_podgroup({"metadata": {"name": "g", "namespace": "ns"},
                            "spec": {"minMember": 2, "deviceConstraints": constraints}})
    assert not group.valid
    assert any(e.startswith(message) for e in group.errors), group.errors


def test_gang_device_constraints_parse() -> None:
    group = parse_podgroup({"metadata": {"name": "g", "namespace": "ns"}, "spec": {
        "minMember": 2, "deviceConstraints": [
            {"matchAttribute": "gpu.example.com/clique", "deviceClassNames": ["gpu"]}]}})
    assert group.valid
    (constraint,) = group.device_constraints
    assert constraint.attribute == "gpu.example.com/clique"
    assert constraint.applies("gpu") and not constraint.applies("nic")


def test_claims_change_without_changing_the_inventory_and_say_which_devices_they_hold(
        ) -> None:
    """The node index and selector outcomes follow the inventory (classes, slices) only;
    a claim's allocation is indexed by device, and devices taken or given back are told."""
    store = DeviceStore()
    told: list[object] = []
    store.on_change = lambda devices: told.append(None if devices is None else set(devices))
    piece = parse_resource_slice({"metadata": {"name": "n1-gpus"}, "spec": {
        "driver": DRIVER, "nodeName": "n1", "pool": {"name": "n1", "resourceSliceCount": 1},
        "devices": [{"name": "d0"}, {"name": "d1"}]}})
    store.update(lambda: store.slices.update({piece.name: piece}))
    assert told == [None]
    inventory = store.inventory
    assert build_index(store).version == inventory
    claim = parse_resource_claim({"metadata": {"name": "c", "namespace": "ns"}, "spec": {
        "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "g"}}]}},
        "status": {"allocation": {"devices": {"results": [
            {"request": "gpu", "driver": DRIVER, "pool": "n1", "device": "d1"}]}}}})
    store.update(lambda: store.claims.update({claim.key: claim}), claim.key)
    assert store.inventory == inventory
    assert store.holders == {(DRIVER, "n1", "d1"): "ns/c"}
    assert store.nodes_of([(DRIVER, "n1", "d1")]) == {"n1"}
    store.update(lambda: store.claims.pop(claim.key), claim.key)
    assert store.holders == {}
    assert told == [None, {(DRIVER, "n1", "d1")}, {(DRIVER, "n1", "d1")}]
