"""What a reliability test saw, for docs/reliability.md: printed, and appended as a JSON line to the file
named by ENVENGINEER_RELIABILITY_LOG when it is set."""

import json
import os


def record(fault: str, behaviour: str, recovery_s: float | None, lost: str = "none") -> None:
    row = {"fault": fault, "behaviour": behaviour, "recovery_s": recovery_s, "lost": lost}
    print(f"reliability: {json.dumps(row)}")
    path = os.environ.get("ENVENGINEER_RELIABILITY_LOG")
    if path:
        with open(path, "a") as out:
            out.write(json.dumps(row) + "\n")
