"""A strfry write-policy plugin for the tests, written as any strfry plugin is: JSON lines in on
stdin, one answer line out per event, flushed. What it does with an event is what the event's
claim text says; it notes every request it reads (and, first, the TMS_* variables it was given)
in the JSON Lines file named by its argument, for the tests to look at: with `probe`, what of
the server's it can see (directory, environment, descriptors, files)."""

import json
import os
import sys
import time


def probe() -> dict[str, object]:
    """Its working directory and what is in it, its environment, its open descriptors (each
    as /proc names its target) and whether the server's files are a relative path away."""
    fds = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            fds[fd] = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # the one listdir used, closed since
            continue
    opened = {}
    for name in ("data/secret", "data/log-key", "server.log"):
        try:
            with open(name, encoding="utf-8") as file:
                opened[name] = file.read()
        except OSError as exc:
            opened[name] = type(exc).__name__
    return {
        "cwd": os.getcwd(),
        "listing": sorted(os.listdir(".")),
        "env": sorted(os.environ),
        "fds": fds,
        "opened": opened,
    }


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
    elif text.startswith("slow:"):  # answers, after this many seconds an event
        time.sleep(float(text[len("slow:") :]))
    elif text == "probe":  # what of the server's it can see: noted for the test
        notes.write(json.dumps({"probe": probe()}) + "\n")
        notes.flush()
    elif text == "chatty":  # stderr without end, as a broken program's
        for number in range(1000):
            print(f"line {number} " + "x" * 2000, file=sys.stderr, flush=True)
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
