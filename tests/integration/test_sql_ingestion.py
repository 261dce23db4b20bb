"""SQL-based ingestion (INSERT / REPLACE on POST /druid/v2/sql/task) through the real HTTP API: the statement becomes
a query_controller task, watched with the task API; answers are checked with Druid SQL against values computed
here from the rows the test wrote."""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

import httpx

from tests.integration.harness import sql, wait_for

DAY1, DAY2 = "2024-05-01", "2024-05-02"


def events(n: int, day: str, seed: int = 0) -> list[dict[str, Any]]:
    return [{"ts": f"{day}T{(i * 5 + seed) % 24:02d}:{i % 60:02d}:00Z", "channel": f"#c{(i + seed) % 3}",
             "added": (i * 7 + seed) % 13} for i in range(n)]


def csv(rows: list[dict[str, Any]]) -> str:
    return "\n".join(f"{r['ts']},{r['channel']},{r['added']}" for r in rows)


def ndjson(rows: list[dict[str, Any]]) -> str:
    return "\n".join(json.dumps(r) for r in rows)


def sql_literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def extern(rows: list[dict[str, Any]]) -> str:
    """TABLE(EXTERN(…)) of inline CSV rows, with Druid's three JSON arguments."""
    source = json.dumps({"type": "inline", "data": csv(rows)})
    fmt = json.dumps({"type": "csv", "columns": ["ts", "channel", "added"]})
    signature = json.dumps([{"name": "ts", "type": "string"}, {"name": "channel", "type": "string"},
                            {"name": "added", "type": "long"}])
    return f"TABLE(EXTERN({sql_literal(source)}, {sql_literal(fmt)}, {sql_literal(signature)}))"


def run(http: httpx.Client, query: str, context: dict[str, Any] | None = None, expect: str = "SUCCESS") -> dict:
    response = http.post("/druid/v2/sql/task", json={"query": query, "context": context or {}})
    assert response.status_code == 202, response.text
    body = response.json()
    assert body["state"] == "RUNNING" and body["taskId"].startswith("query-")
    task_id = body["taskId"]
    status = wait_for(lambda: (s := http.get(f"/druid/indexer/v1/task/{task_id}/status").json()["status"])
                      ["statusCode"] != "RUNNING" and s, 240, f"task {task_id}")
    assert status["statusCode"] == expect, status
    assert status["type"] == "query_controller"
    report = http.get(f"/druid/indexer/v1/task/{task_id}/reports").json()
    assert report["multiStageQuery"]["payload"]["status"]["status"] == expect
    assert "ingestionStatsAndErrors" in report
    return report


def per_channel(rows: list[dict[str, Any]]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for r in rows:
        out[r["channel"]][0] += 1
        out[r["channel"]][1] += r["added"]
    return dict(out)


def answers(http: httpx.Client, data_source: str, count: str = "COUNT(*)") -> dict[str, list[int]]:
    result = sql(http, f"SELECT channel, {count} AS n, SUM(added) AS a FROM {data_source} GROUP BY channel")
    return {r["channel"]: [r["n"], r["a"]] for r in result}


def test_insert_from_extern_inline_csv(http):
    rows = events(120, DAY1)
    run(http, f"INSERT INTO sqli_csv SELECT TIME_PARSE(ts) AS __time, channel, added FROM {extern(rows)} "
              "PARTITIONED BY DAY")
    assert answers(http, "sqli_csv") == per_channel(rows)
    typed = sql(http, "SELECT COUNT(*) AS n, MIN(__time) AS t FROM sqli_csv WHERE added >= 10")
    assert typed[0]["n"] == sum(1 for r in rows if r["added"] >= 10)


def test_insert_from_inline_table_function_json_with_expressions_and_where(http):
    rows = events(90, DAY1, seed=2)
    data = ", ".join(sql_literal(json.dumps(r)) for r in rows)
    run(http, "INSERT INTO sqli_json SELECT TIME_PARSE(ts) AS __time, UPPER(channel) AS channel, added * 2 AS added "
              f"FROM TABLE(inline(data => ARRAY[{data}], format => 'json')) "
              "EXTEND (ts VARCHAR, channel VARCHAR, added BIGINT) WHERE added > 3 PARTITIONED BY DAY")
    kept = [{**r, "channel": r["channel"].upper(), "added": r["added"] * 2} for r in rows if r["added"] > 3]
    assert answers(http, "sqli_json") == per_channel(kept)


def test_group_by_rolls_up_at_time_floor(http):
    rows = events(200, DAY1) + events(100, DAY2, seed=1)
    run(http, "REPLACE INTO sqli_rollup OVERWRITE ALL SELECT TIME_FLOOR(TIME_PARSE(ts), 'PT1H') AS __time, channel, "
              f"COUNT(*) AS cnt, SUM(added) AS added, MAX(added) AS most FROM {extern(rows)} GROUP BY 1, 2 "
              "PARTITIONED BY DAY CLUSTERED BY channel")
    hours = {(r["ts"][:13], r["channel"]) for r in rows}
    stored = sql(http, "SELECT COUNT(*) AS n, SUM(cnt) AS c, MAX(most) AS m FROM sqli_rollup")[0]
    assert stored == {"n": len(hours), "c": len(rows), "m": max(r["added"] for r in rows)}
    assert answers(http, "sqli_rollup", 'SUM("cnt")') == per_channel(rows)


def test_replace_overwrite_where_replaces_only_inside_the_range(http):
    first = events(80, DAY1) + events(60, DAY2)
    run(http, f"REPLACE INTO sqli_where OVERWRITE ALL SELECT TIME_PARSE(ts) AS __time, channel, added "
              f"FROM {extern(first)} PARTITIONED BY DAY")
    second = events(30, DAY2, seed=4)
    run(http, f"REPLACE INTO sqli_where OVERWRITE WHERE __time >= TIMESTAMP '{DAY2}' AND __time < TIMESTAMP "
              f"'2024-05-03' SELECT TIME_PARSE(ts) AS __time, channel, added FROM {extern(second)} PARTITIONED BY DAY")
    day1 = sql(http, f"SELECT COUNT(*) AS n, SUM(added) AS a FROM sqli_where WHERE __time < TIMESTAMP '{DAY2}'")[0]
    day2 = sql(http, f"SELECT COUNT(*) AS n, SUM(added) AS a FROM sqli_where WHERE __time >= TIMESTAMP '{DAY2}'")[0]
    kept = [r for r in first if r["ts"].startswith(DAY1)]
    assert day1 == {"n": len(kept), "a": sum(r["added"] for r in kept)}
    assert day2 == {"n": len(second), "a": sum(r["added"] for r in second)}


def test_replace_all_twice_gives_the_same_answers_and_drops_what_is_not_written(http):
    old = events(50, DAY1) + events(50, DAY2)
    run(http, f"REPLACE INTO sqli_all OVERWRITE ALL SELECT TIME_PARSE(ts) AS __time, channel, added FROM {extern(old)} "
              "PARTITIONED BY DAY")
    new = events(70, DAY2, seed=3)
    statement = (f"REPLACE INTO sqli_all OVERWRITE ALL SELECT TIME_PARSE(ts) AS __time, channel, added "
                 f"FROM {extern(new)} PARTITIONED BY DAY")
    run(http, statement)
    once = answers(http, "sqli_all")
    run(http, statement)
    assert answers(http, "sqli_all") == once == per_channel(new)


def test_insert_select_from_another_data_source(http):
    rows = events(150, DAY1, seed=5) + events(40, DAY2)
    run(http, f"REPLACE INTO sqli_src OVERWRITE ALL SELECT TIME_PARSE(ts) AS __time, channel, added FROM {extern(rows)} "
              "PARTITIONED BY DAY")
    run(http, "INSERT INTO sqli_copy SELECT __time, channel, added FROM sqli_src "
              f"WHERE __time >= TIMESTAMP '{DAY1}' AND __time < TIMESTAMP '{DAY2}' AND channel <> '#c0' "
              "PARTITIONED BY DAY")
    kept = [r for r in rows if r["ts"].startswith(DAY1) and r["channel"] != "#c0"]
    assert answers(http, "sqli_copy") == per_channel(kept)


def test_bad_statements_are_druid_400s(http):
    response = http.post("/druid/v2/sql/task", json={"query": "INSERT INTO x SELECT a FROM y JOIN z ON y.a = z.a "
                                                               "PARTITIONED BY DAY"})
    assert response.status_code == 400
    body = response.json()
    assert body["error"] == "druidException" and body["errorCode"] == "invalidInput"
    assert body["persona"] == "USER" and body["category"] == "INVALID_INPUT"
    assert "JOIN" in body["errorMessage"]
    response = http.post("/druid/v2/sql/task", json={"query": "SELECT 1"})
    assert response.status_code == 400 and "/druid/v2/sql" in response.json()["errorMessage"]
