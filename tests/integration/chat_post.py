"""POST to an OpenAI-compatible /v1/chat/completions, for the Python drivers
of the cluster tests (tests/integration/test_cluster_*.sh run them from the
repository root, with tests/integration on sys.path)."""
import json
import urllib.error
import urllib.request


def post_chat(url, body, timeout=120):
    """POSTs body (a dict) as JSON to url + /v1/chat/completions. Returns
    (HTTP status, parsed JSON body), for error statuses too."""
    req = urllib.request.Request(url + "/v1/chat/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)
