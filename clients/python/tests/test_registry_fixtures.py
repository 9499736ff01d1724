"""The golden fixtures of spec/registry/ (which the Rust crate registry-api round-trips
too): each parses with the schema its name says and dumps back to the same JSON; a
fixture of no known body, and a body without a fixture, fail."""

import json
from pathlib import Path

import pytest

from netaccel import registry_api as api
from netaccel.registry import Binding

FIXTURES = Path(__file__).resolve().parents[3] / "spec" / "registry"


def fixtures():
    return sorted(FIXTURES.glob("*.json"))


def test_the_fixtures_are_found_relative_to_the_repository():
    assert FIXTURES.is_dir(), FIXTURES
    assert len(fixtures()) >= len(api.bodies())


@pytest.mark.parametrize("path", fixtures(), ids=lambda p: p.name)
def test_every_fixture_round_trips(path):
    schema = api.schema_of_fixture(path.name)
    assert schema is not None, f"{path.name}: no schema for it"
    doc = json.loads(path.read_text())
    assert api.dump(schema, api.parse(schema, doc)) == doc


def test_every_body_has_a_fixture():
    have = {api.schema_of_fixture(p.name) for p in fixtures()}
    assert set(api.bodies()) <= have, set(api.bodies()) - have


def test_bindings_are_read_through_the_schema():
    for path in FIXTURES.glob("binding*.json"):
        doc = json.loads(path.read_text())
        assert Binding.from_json(doc).to_json() == doc, path.name
    bound = Binding.from_json(json.loads((FIXTURES / "binding.json").read_text()))
    assert bound.bound and bound.grpc == "10.0.0.11:8001"


def test_documents_of_the_wrong_shape_are_refused():
    binding = json.loads((FIXTURES / "binding.json").read_text())
    for change, want in [
        ({"slot": 70000}, "0..=65535"),
        ({"generation": "4"}, "integer"),
        ({"http": "nowhere"}, "HOST:PORT"),
        ({"id": None}, "null"),
    ]:
        with pytest.raises(api.ShapeError, match=want):
            api.parse("binding", {**binding, **change})
    without = dict(binding)
    del without["function"]
    with pytest.raises(api.ShapeError, match="function is missing"):
        api.parse("binding", without)
    registration = json.loads((FIXTURES / "node-registration.json").read_text())
    with pytest.raises(api.ShapeError, match="unknown fields"):
        api.parse("node-registration", {**registration, "temperature": 40})
    # Answers tolerate a field a newer registry adds.
    assert api.parse("binding", {**binding, "zone": "b"})["id"] == "edges-1"
