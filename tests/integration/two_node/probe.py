"""Run inside a namespace (`ip netns exec NS python -m tests.integration.two_node.probe ...`),
where the cluster's router and Ray head are reachable; prints one JSON document.

  complete URL    greedy completions of the JSON list of prompts on stdin, through the
                  official client: [{"text", "served_by", "decision"}]
  stats GCS       the decode pool's engine counters, through a Serve handle
"""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import Any


def complete(url: str, prompts: list[str], max_tokens: int) -> list[dict[str, Any]]:
    import openai

    client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=120)
    out = []
    for prompt in prompts:
        raw = client.completions.with_raw_response.create(
            model="pdserve-demo", prompt=prompt, max_tokens=max_tokens, temperature=0, seed=7
        )
        resp = raw.parse()
        out.append(
            {
                "text": resp.choices[0].text,
                "served_by": json.loads(raw.headers["x-pdserve-served-by"]),
                "decision": json.loads(raw.headers["x-pdserve-decision"]),
            }
        )
    return out


def decode_stats(gcs_address: str) -> dict[str, Any]:
    import ray
    from ray import serve

    ray.init(address=gcs_address, logging_level="ERROR", log_to_driver=False)
    handle = serve.get_deployment_handle("DecodeServer", app_name="pdserve")
    return dataclasses.asdict(handle.stats.remote().result(timeout_s=60))


def main(argv: list[str]) -> None:
    if argv[0] == "complete":
        result: Any = complete(argv[1], json.loads(sys.stdin.read()), int(argv[2]))
    elif argv[0] == "stats":
        result = decode_stats(argv[1])
    else:
        raise SystemExit(f"unknown probe {argv[0]!r}")
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1:])
