"""One pull-request comment per kind of aksgpu result on Azure DevOps, updated instead of repeated.

The comment's first line is an HTML comment that names it (`<!-- aksgpu:plan-summary -->`,
`<!-- aksgpu:preview:prod -->`); a later run finds the thread that starts with the same line and
edits its first comment. Uses the Azure DevOps REST API (Git pull-request threads, 7.1) with the
pipeline's own token (System.AccessToken).
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any

from aksgpu.errors import Problem, UserError

API_VERSION = "7.1"
MARKER_LINE = re.compile(r"^<!-- aksgpu:[a-z0-9:._-]+ -->$")
# Azure DevOps limits a comment to 150,000 characters; stay well below.
MAX_CHARACTERS = 100_000
REQUIRED_VARIABLES = ("SYSTEM_COLLECTIONURI", "SYSTEM_TEAMPROJECTID", "BUILD_REPOSITORY_ID",
                      "SYSTEM_PULLREQUEST_PULLREQUESTID", "SYSTEM_ACCESSTOKEN")

Send = Callable[[str, str, dict[str, Any] | None], dict[str, Any]]


def threads_url(env: Mapping[str, str]) -> str:
    collection = env["SYSTEM_COLLECTIONURI"].rstrip("/")
    return (f"{collection}/{env['SYSTEM_TEAMPROJECTID']}/_apis/git/repositories/{env['BUILD_REPOSITORY_ID']}"
            f"/pullRequests/{env['SYSTEM_PULLREQUEST_PULLREQUESTID']}/threads")


def post_or_update(body: str, env: Mapping[str, str], send: Send | None = None) -> str:
    """Create the comment, or edit the one a previous run made; 'created' or 'updated'."""
    missing = [name for name in REQUIRED_VARIABLES if not env.get(name)]
    if missing:
        raise UserError(f"not in an Azure Pipelines pull-request run: {', '.join(missing)} not set. Fix: run it "
                        "from the pipeline's pull-request build, with env: SYSTEM_ACCESSTOKEN: $(System.AccessToken).")
    marker = body.split("\n", 1)[0].strip()
    if not MARKER_LINE.fullmatch(marker):
        raise UserError(problems=[Problem("FILE argument", marker, 'the first line must be an aksgpu marker line '
                                          'such as "<!-- aksgpu:plan-summary -->"', "pass a file made by "
                                          "`aksgpu ci summary`, or start it with such a line")])
    if len(body) > MAX_CHARACTERS:
        body = body[:MAX_CHARACTERS] + "\n\n_(cut here: the full text is in the pipeline run)_\n"
    send = send or _sender(env["SYSTEM_ACCESSTOKEN"])
    url = threads_url(env)
    threads = send("GET", f"{url}?api-version={API_VERSION}", None).get("value", [])
    for thread in threads:
        comments = thread.get("comments") or []
        first = comments[0] if comments else {}
        if str(first.get("content", "")).split("\n", 1)[0].strip() == marker:
            send("PATCH", f"{url}/{thread['id']}/comments/{first['id']}?api-version={API_VERSION}",
                 {"content": body})
            return "updated"
    send("POST", f"{url}?api-version={API_VERSION}",
         {"comments": [{"parentCommentId": 0, "content": body, "commentType": 1}], "status": 1})
    return "created"


def _sender(token: str) -> Send:
    def send(method: str, url: str, payload: dict[str, Any] | None) -> dict[str, Any]:
        data = json.dumps(payload).encode() if payload is not None else None
        request = urllib.request.Request(url, data=data, method=method, headers={
            "Authorization": f"Bearer {token}", "Content-Type": "application/json", "Accept": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 - an https URL from the agent
                return json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as error:
            hint = (" Fix: allow the build service to contribute to pull requests (Project settings > Repositories "
                    "> Security: 'Contribute to pull requests' for the project's Build Service)."
                    if error.code in (401, 403) else
                    " Fix: run the job again; if it fails the same way, check that the pull request is still open.")
            raise UserError(f"Azure DevOps answered {error.code} to {method} {url.split('?')[0]}.{hint}") from None
        except urllib.error.URLError as error:
            raise UserError(f"cannot reach Azure DevOps ({error.reason}). Fix: check the agent's network.") from None

    return send
