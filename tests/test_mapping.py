import re

import pytest

from appliance.core.errors import MappingError
from appliance.model.inference import infer_mapping, sample_objects, widen
from appliance.model.mapping import Column, Mapping, column_problems
from appliance.model.names import snake_case
from appliance.model.types import UnknownType, parse_type


def cols(mapping: Mapping) -> dict[str, tuple[str, str]]:
    return {c.name: (c.type, ".".join(c.source)) for c in mapping.columns}


def test_nested_objects_flatten_to_snake_case_names():
    m = infer_mapping([{"orderId": 1, "customer": {"firstName": "Ada", "Address": {"ZIPCode": "1000"}}}])
    assert cols(m) == {
        "order_id": ("long", "orderId"),
        "customer_first_name": ("string", "customer.firstName"),
        "customer_address_zip_code": ("string", "customer.Address.ZIPCode"),
    }


def test_types_widen_across_the_sample():
    m = infer_mapping([
        {"a": 1, "b": 1, "c": True, "d": "x", "e": None, "f": "2024-01-01"},
        {"a": 2.5, "b": "two", "c": False, "d": None, "e": None, "f": "2024-01-01T10:00:00Z"},
    ])
    assert cols(m) == {
        "a": ("double", "a"), "b": ("string", "b"), "c": ("boolean", "c"),
        "d": ("string", "d"), "e": ("string", "e"), "f": ("timestamptz", "f"),
    }


@pytest.mark.parametrize("text", ["2024-05-01T12:00:00Z", "2024-05-01 12:00:00", "2024-05-01T12:00:00.123+02:00"])
def test_timestamps_are_recognised(text):
    assert cols(infer_mapping([{"t": text}]))["t"] == ("timestamptz", "t")


def test_arrays_and_mixed_object_scalar_fields_become_json():
    m = infer_mapping([{"tags": [1, 2], "x": {"y": 1}}, {"x": 5}])
    assert cols(m) == {"tags": ("json", "tags"), "x": ("json", "x")}


def test_name_collisions_are_renamed_and_reserved_names_avoided():
    m = infer_mapping([{"a_b": 1, "a": {"b": 2}, "_kafka_offset": 3}])
    assert set(cols(m)) == {"a_b", "a_b_2", "kafka_offset"}


def test_widen_is_symmetric():
    kinds = ["null", "boolean", "long", "double", "string", "date", "timestamptz", "json"]
    for a in kinds:
        for b in kinds:
            assert widen(a, b) == widen(b, a)


def test_no_object_in_sample_is_an_error():
    with pytest.raises(MappingError, match="no JSON object"):
        infer_mapping(sample_objects([b"[1]", b"not json", b"", None]))


def test_snake_case():
    assert snake_case("customerId") == "customer_id"
    assert snake_case("HTTPStatus") == "http_status"
    assert snake_case("Order-Lines") == "order_lines"
    assert snake_case("2fa") == "_2fa"
    assert snake_case("été") == "t"


def test_toml_round_trip_keeps_the_mapping():
    m = infer_mapping([{"a": 1, "b": {"c.d": "x"}, "t": "2024-05-01T00:00:00Z"}])
    again = Mapping.from_toml(m.to_toml("header"))
    assert again == m
    assert ("b", "c.d") in [c.source for c in again.columns]


@pytest.mark.parametrize(
    "text, message",
    [
        ("columns = [", "not valid TOML"),
        ("x = 1", "needs one or more"),
        ('columns = [{name = "A", type = "long", source = "a"}]', "lower snake_case"),
        ('columns = [{name = "a", type = "bigint", source = "a"}]', "unknown type 'bigint'"),
        ('columns = [{name = "a", type = "long", source = "a"}, {name = "a", type = "long"}]', "appears more than once"),
        ('columns = [{name = "_kafka_offset", type = "long"}]', "reserved"),
        ('columns = [{name = "a", type = "long", sauce = "a"}]', "unknown key 'sauce'"),
    ],
)
def test_malformed_mapping_files_are_named_errors(text, message, tmp_path):
    path = tmp_path / "m.toml"
    path.write_text(text)
    with pytest.raises(MappingError, match=message) as info:
        Mapping.from_file(path)
    assert str(path) in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("text, name, iceberg, arrow", [
    ("timestamptz", "timestamptz", "timestamptz", "timestamp[us, tz=UTC]"),
    ("Decimal( 10 , 2 )", "decimal(10,2)", "decimal(10, 2)", "decimal128(10, 2)"),
    ("binary", "binary", "binary", "binary"),
    ("uuid", "uuid", "uuid", "extension<arrow.uuid>"),
    ("time", "time", "time", "time64[us]"),
    ("list<long>", "list<long>", "list<long>", "list<element: int64>"),
    ("map<string, list<decimal(5,1)>>", "map<string,list<decimal(5,1)>>", "map<string, list<decimal(5, 1)>>",
     "map<string, list<element: decimal128(5, 1)>>"),
])
def test_column_types_map_to_iceberg_and_arrow(text, name, iceberg, arrow):
    ids = iter(range(100, 200))
    assert parse_type(text).name == name
    col = Column("t", name, ("t",))
    assert str(col.iceberg_type(lambda: next(ids))) == iceberg
    assert str(col.arrow_type) == arrow


@pytest.mark.parametrize("text, problem", [
    ("decimal(39,2)", "precision must be 1..38"),
    ("decimal(5,6)", "scale at most the precision"),
    ("map<list<long>,long>", "keys must be a simple type"),
    ("map<string>", "needs a key and a value type"),
    ("list<strng>", "unknown type 'strng'"),
    ("varchar", "unknown type 'varchar'"),
])
def test_a_type_that_is_not_one_is_refused_with_the_reason(text, problem):
    with pytest.raises(UnknownType, match=re.escape(problem)):
        parse_type(text)
    assert column_problems([("c", text, ("c",))])


def test_a_mapping_file_keeps_its_ignored_fields_and_canonical_types(tmp_path):
    path = tmp_path / "m.toml"
    path.write_text('ignore = ["customer.email"]\n[[columns]]\nname = "amount"\ntype = "DECIMAL(10, 2)"\n'
                    'source = "amount"\n')
    mapping = Mapping.from_file(path)
    assert mapping.columns[0].type == "decimal(10,2)" and mapping.ignored == (("customer", "email"),)
    assert Mapping.from_toml(mapping.to_toml()) == mapping


def test_rare_misfits_do_not_turn_a_typed_column_into_text():
    sample = [{"id": i, "at": "2024-05-01T00:00:00Z", "n": i * 1.5} for i in range(100)]
    sample += [{"id": "twelve", "at": "whenever"}]  # bad data, bound for the dead-letter table
    assert cols(infer_mapping(sample)) == {"id": ("long", "id"), "at": ("timestamptz", "at"), "n": ("double", "n")}


def test_common_text_values_still_widen_and_numbers_never_narrow():
    sample = [{"code": i} for i in range(90)] + [{"code": f"A{i}"} for i in range(10)]
    sample += [{"x": 1} for _ in range(99)] + [{"x": 1.5}]
    assert cols(infer_mapping(sample)) == {"code": ("string", "code"), "x": ("double", "x")}
