"""Fuzzed bad input that never reaches the API server: configuration files and PodGroup
objects. The only acceptable failure is a clear, field-naming error."""

from __future__ import annotations

import contextlib
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coscheduling.api.podgroups import parse_podgroup
from coscheduling.api.pods import parse_pod
from coscheduling.config import ConfigError, parse_config
from coscheduling.config.load import dump_defaults
from coscheduling.plugins.registry import default_registry

scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6),
                    st.floats(allow_nan=True), st.text(max_size=12))
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=10), inner, max_size=4)),
    max_leaves=12)

FIELDS = list(dump_defaults())


def _mutate(doc: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    out = dict(doc)
    out[key] = value
    return out


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.sampled_from(FIELDS), values)
def test_random_config_values_give_a_config_error_or_a_config(field: str, value: Any) -> None:
    try:
        parse_config(_mutate(dump_defaults(), field, value), default_registry())
    except ConfigError as err:
        assert err.path, f"error without a field: {err}"


@settings(max_examples=200, deadline=None)
@given(values)
def test_random_documents_never_raise_anything_but_config_error(doc: Any) -> None:
    with contextlib.suppress(ConfigError):
        parse_config(doc, default_registry())


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=200))
def test_random_yaml_text(text: str) -> None:
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError:
        return
    with contextlib.suppress(ConfigError):
        parse_config(doc, default_registry())


@settings(max_examples=300, deadline=None)
@given(values)
def test_random_podgroup_specs_parse_to_a_record_with_errors_named(spec: Any) -> None:
    group = parse_podgroup({"metadata": {"name": "g", "namespace": "n"}, "spec": spec})
    for error in group.errors:
        assert error.startswith("spec"), error
    if group.valid:
        assert group.min_member >= 1


@settings(max_examples=300, deadline=None)
@given(values, values)
def test_random_pod_specs_never_crash_the_parser(containers: Any, overhead: Any) -> None:
    pod = parse_pod({"metadata": {"name": "p", "namespace": "n"},
                     "spec": {"containers": containers if isinstance(containers, list) else [],
                              "overhead": overhead}})
    assert pod.parse_error == "" or pod.parse_error.startswith(("spec", "metadata", "status"))
