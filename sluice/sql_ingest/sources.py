"""The FROM of an ingestion SELECT as an input source: `EXTERN(…)`, the table functions `http`, `inline`,
`localfiles`, `s3` (Druid's HttpInputSourceDefn, InlineInputSourceDefn, LocalInputSourceDefn, S3InputSourceDefn
parameter names; the format arguments of InputFormats: `format`, `listDelimiter`, `skipHeaderRows`, `delimiter`),
or a Druid table read through the `druid` input source."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlglot import exp

from sluice.sql_ingest.expressions import SQL_TYPES
from sluice.sql_ingest.parse import ExternalTable, invalid

_SIGNATURE_TYPES = {"string": "string", "long": "long", "double": "double", "float": "float"}

#: a Druid data source's columns and their Druid types (`__time` included), or None when it has no segments
Catalog = Callable[[str], "dict[str, str] | None"]


@dataclass
class Source:
    input_source: dict[str, Any]
    input_format: dict[str, Any] | None
    #: column -> Druid type (string, long, double, float), in the source's order
    types: dict[str, str] = field(default_factory=dict)

    @property
    def is_druid(self) -> bool:
        return self.input_source["type"] == "druid"


def external_source(table: ExternalTable) -> Source:
    args, positional = _arguments(table)
    if table.function == "EXTERN":
        return _extern(args, positional, table.columns)
    if positional:
        raise invalid(f"Table function {table.function.lower()} takes named arguments (name => value)")
    builders = {"HTTP": _http, "INLINE": _inline, "LOCALFILES": _localfiles, "S3": _s3}
    if table.function not in builders:
        raise invalid(f"Table function [{table.function.lower()}] is not supported; use EXTERN, http, inline, "
                      "localfiles or s3")
    if not table.columns:
        raise invalid(f"Table function {table.function.lower()} needs its columns: add EXTEND (name TYPE, …)")
    types = _extend_types(table.columns)
    source = builders[table.function](args)
    return Source(source, _format(args, list(types)), types)


def druid_source(data_source: str, catalog: Catalog, interval: str) -> Source:
    types = catalog(data_source)
    if types is None:
        raise invalid(f"Object '{data_source}' not found")
    return Source({"type": "druid", "dataSource": data_source, "interval": interval}, None, types)


def _arguments(table: ExternalTable) -> tuple[dict[str, Any], list[Any]]:
    named: dict[str, Any] = {}
    positional: list[Any] = []
    for arg in table.call.expressions:
        if isinstance(arg, exp.Kwarg):
            named[arg.this.name] = _value(arg.expression)
        elif named:
            raise invalid("Positional arguments must come before named ones")
        else:
            positional.append(_value(arg))
    return named, positional


def _value(node: exp.Expression) -> Any:
    if isinstance(node, exp.Array):
        return [_value(v) for v in node.expressions]
    if isinstance(node, exp.Literal):
        return node.this if node.is_string else json.loads(node.this)
    if isinstance(node, exp.Boolean):
        return bool(node.this)
    if isinstance(node, exp.Null):
        return None
    raise invalid(f"Table function arguments must be literals or ARRAY[…], found [{node.sql(dialect='druid')}]")


def _json(text: Any, what: str) -> Any:
    if not isinstance(text, str):
        raise invalid(f"EXTERN's {what} must be a JSON string")
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise invalid(f"EXTERN's {what} is not valid JSON: {error}") from None


def _extern(args: dict[str, Any], positional: list[Any], columns: list[tuple[str, str]]) -> Source:
    values = dict(zip(("inputSource", "inputFormat", "signature"), positional)) | args
    if "inputSource" not in values or "inputFormat" not in values:
        raise invalid("EXTERN needs inputSource and inputFormat")
    source, fmt = _json(values["inputSource"], "inputSource"), _json(values["inputFormat"], "inputFormat")
    if "signature" in values and columns:
        raise invalid("EXTERN takes either a signature or an EXTEND column list, not both")
    if "signature" in values:
        signature = _json(values["signature"], "signature")
        if not isinstance(signature, list) or not all(isinstance(c, dict) and "name" in c for c in signature):
            raise invalid("EXTERN's signature must be a JSON array of {\"name\", \"type\"} objects")
        types = {}
        for column in signature:
            kind = str(column.get("type", "string")).lower()
            if kind not in _SIGNATURE_TYPES:
                raise invalid(f"Column [{column['name']}] of EXTERN's signature has type [{kind}]; "
                              "expected string, long, double or float")
            types[column["name"]] = _SIGNATURE_TYPES[kind]
    elif columns:
        types = _extend_types(columns)
    else:
        raise invalid("EXTERN needs a signature (third argument) or an EXTEND column list")
    if not isinstance(source, dict) or not isinstance(fmt, dict):
        raise invalid("EXTERN's inputSource and inputFormat must be JSON objects")
    return Source(source, fmt, types)


def _extend_types(columns: list[tuple[str, str]]) -> dict[str, str]:
    types = {}
    for name, sql_type in columns:
        if sql_type not in SQL_TYPES:
            raise invalid(f"Column [{name}] has type [{sql_type}]; expected VARCHAR, BIGINT, DOUBLE or FLOAT")
        types[name] = SQL_TYPES[sql_type]
    return types


def _format(args: dict[str, Any], columns: list[str]) -> dict[str, Any]:
    kind = str(args.get("format", "")).lower()
    if kind in ("csv", "tsv"):
        fmt: dict[str, Any] = {"type": kind, "columns": columns, "findColumnsFromHeader": False,
                               "skipHeaderRows": int(args.get("skipHeaderRows") or 0)}
        if args.get("listDelimiter") is not None:
            fmt["listDelimiter"] = args["listDelimiter"]
        if kind == "tsv" and args.get("delimiter") is not None:
            fmt["delimiter"] = args["delimiter"]
        return fmt
    if kind == "json":
        return {"type": "json"}
    raise invalid(f"Table function format [{args.get('format')}] is not supported; expected csv, tsv or json")


def _strings(value: Any, name: str) -> list[str]:
    values = value if isinstance(value, list) else [value] if value is not None else []
    if not all(isinstance(v, str) for v in values):
        raise invalid(f"Parameter {name} must be a string or ARRAY of strings")
    return values


def _http(args: dict[str, Any]) -> dict[str, Any]:
    source: dict[str, Any] = {"type": "http", "uris": _strings(args.get("uris"), "uris")}
    if not source["uris"]:
        raise invalid("One or more URIs is required in parameter uris")
    if args.get("userName") is not None:
        source["httpAuthenticationUsername"] = args["userName"]
    if args.get("password") is not None and args.get("passwordEnvVar") is not None:
        raise invalid("Specify only one of password or passwordEnvVar")
    if args.get("password") is not None:
        source["httpAuthenticationPassword"] = {"type": "default", "password": args["password"]}
    elif args.get("passwordEnvVar") is not None:
        source["httpAuthenticationPassword"] = {"type": "environment", "variable": args["passwordEnvVar"]}
    if args.get("headers") is not None:
        source["requestHeaders"] = _json(args["headers"], "headers")
    return source


def _inline(args: dict[str, Any]) -> dict[str, Any]:
    rows = _strings(args.get("data"), "data")
    if not rows:
        raise invalid("An inline table requires one or more rows of data in the 'data' property")
    data = "\n".join(rows)
    return {"type": "inline", "data": data if data.endswith("\n") else data + "\n"}


def _localfiles(args: dict[str, Any]) -> dict[str, Any]:
    base, files, filter_ = args.get("baseDir"), _strings(args.get("files"), "files"), args.get("filter")
    if not base and not files:
        raise invalid("A local input source requires one parameter of baseDir or files")
    if base and files:
        if filter_:
            raise invalid("A local input source can set parameter files or filter, but not both.")
        return {"type": "local", "files": [f"{base.rstrip('/')}/{f}" for f in files]}
    if filter_ and not base:
        raise invalid("If a local input source sets parameter filter, it must also set parameter baseDir")
    if base:
        return {"type": "local", "baseDir": base, "filter": filter_ or "*"}
    return {"type": "local", "files": files}


def _s3(args: dict[str, Any]) -> dict[str, Any]:
    source: dict[str, Any] = {"type": "s3"}
    if args.get("uris") is not None:
        source["uris"] = _strings(args["uris"], "uris")
    if args.get("prefixes") is not None:
        source["prefixes"] = _strings(args["prefixes"], "prefixes")
    if args.get("bucket") is not None:
        source["objects"] = [{"bucket": args["bucket"], "path": p} for p in _strings(args.get("paths"), "paths")]
    if args.get("pattern") is not None:
        source["objectGlob"] = args["pattern"]
    if args.get("accessKeyId") is not None or args.get("secretAccessKey") is not None:
        source["properties"] = {"accessKeyId": args.get("accessKeyId"), "secretAccessKey": args.get("secretAccessKey")}
    return source
