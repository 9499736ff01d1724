"""One case of cases.json as lines a driver in a language without a JSON parser at hand
(C) reads with fgets/sscanf:

    mode sync|pipelined
    function NAME                                   (registry cases only)
    call ACCELERATOR|#ID DEADLINE_US PARAMS PAYLOAD

PARAMS is `name=value,…` or `-`; PAYLOAD is lower-case hex (fills expanded) or `-`.

    python3 flatten.py cases.json NAME
"""

import json
import sys


def flatten(case):
    yield f"mode {case['mode']}"
    if "function" in case:
        yield f"function {case['function']}"
    for call in case["calls"]:
        accel = f"#{call['accelerator_id']}" if "accelerator_id" in call else call.get("accelerator", "-")
        params = ",".join(f"{k}={v}" for k, v in call.get("params", {}).items()) or "-"
        if "payload_fill" in call:
            payload = call["payload_fill"]["byte"] * call["payload_fill"]["len"]
        else:
            payload = call.get("payload_hex", "")
        yield f"call {accel} {call.get('deadline_us', 0)} {params} {payload or '-'}"


if __name__ == "__main__":
    cases = json.load(open(sys.argv[1]))["cases"]
    case = next(c for c in cases if c["name"] == sys.argv[2])
    print("\n".join(flatten(case)))
