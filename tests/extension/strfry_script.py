"""A strfry write-policy plugin for the tests, written as any strfry plugin is: JSON lines in on
stdin, one answer line out per event, flushed. What it does with an event is what the event's
claim text says; it notes every request it reads (and, first, the TMS_* variables it was given)
in the JSON Lines file named by its argument, for the tests to look at."""

import json
import os
import sys
import time

notes = open(sys.argv[1], "a", encoding="utf-8")  # noqa: SIM115
notes.write(
    json.dumps(
        {"started": os.getpid(), "tms": sorted(k for k in os.environ if k.startswith("TMS_"))}
    )
    + "\n"
)
notes.flush()

for line in sys.stdin:
    request = json.loads(line)
    notes.write(json.dumps(request) + "\n")
    notes.flush()
    event = request["event"]
    text = json.loads(event["content"]).get("text", "")
    answer = {"id": event["id"], "action": "accept"}
    if text.startswith("reject:"):
        answer = {"id": event["id"], "action": "reject", "msg": text[len("reject:") :]}
    elif text == "shadow":
        answer["action"] = "shadowReject"
    elif text == "crash":
        sys.exit(3)
    elif text == "hang":
        time.sleep(3600)
    elif text == "garbage":
        print("this is not JSON", flush=True)
    elif text == "stranger":
        print(json.dumps({"id": "0" * 64, "action": "accept"}), flush=True)
    elif text == "unknown":
        answer["action"] = "maybe"
    elif text == "long":
        print(json.dumps({"id": event["id"], "action": "accept", "msg": "x" * 10_000}), flush=True)
        continue
    print(json.dumps(answer), flush=True)
