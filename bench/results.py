"""What the target judges share: reading a results file."""
import json
import sys


def load(path):
    """The JSON in `path`, or None (said on stderr) when it is missing or not JSON."""
    try:
        with open(path) as f:
            return json.load(f)
    except (FileNotFoundError, json.JSONDecodeError) as e:
        print(f"cannot read {path}: {e}", file=sys.stderr)
        return None
