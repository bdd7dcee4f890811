"""Drive a software release through its ordered workflow: create, link blockers, test, fix, ship."""
import random
from typing import Tuple

COMPONENTS = ["auth", "billing", "search", "mobile"]
NEXT_STATUS = {"todo": "testing", "testing": "shipped"}


class ReleaseTrainEnv(ToolUseBaseEnv):
    def reset(self, seed=None) -> Tuple[str, dict]:
        rng = random.Random(seed)
        self.turn_count, self._call_history = 0, []
        self._component, self._version = rng.choice(COMPONENTS), f"{rng.randint(1, 4)}.{rng.randint(0, 9)}"
        issues = {}
        for k in range(12):
            component = self._component if k < 5 else rng.choice(COMPONENTS)
            labels = sorted({"blocker"} if k < 2 else set(rng.sample(["blocker", "ui", "minor", "perf"], 2)))
            status = "open" if k < 2 else rng.choice(["open", "closed"])
            issues[f"BUG-{100 + 7 * k + rng.randint(0, 6)}"] = {"kind": "bug", "component": component,
                                                                "labels": labels, "status": status, "links": []}
        self._state = {"issues": issues}
        self._blockers = {i for i, v in issues.items() if v["component"] == self._component
                          and "blocker" in v["labels"] and v["status"] == "open"}
        self._title = f"Release {self._version}"
        obj = lambda props, req: {"type": "object", "properties": props, "required": req}
        text = {"type": "string"}
        self._tools = {
            "create_issue": {"description": "Create an issue; returns its id",
                             "parameters": obj({"title": text, "kind": {"type": "string", "enum":
                                                ["bug", "feature", "release"]}}, ["title", "kind"])},
            "list_issues": {"description": "List issues of a component that carry a label (id and status)",
                            "parameters": obj({"component": {"type": "string", "enum": COMPONENTS},
                                               "label": text}, ["component", "label"])},
            "link_issue": {"description": "Link a bug to a release",
                           "parameters": obj({"release_id": text, "issue_id": text}, ["release_id", "issue_id"])},
            "transition": {"description": "Move a release to its next status (todo -> testing -> shipped)",
                           "parameters": obj({"issue_id": text, "status": {"type": "string", "enum":
                                              ["todo", "testing", "shipped"]}}, ["issue_id", "status"])},
            "close_issue": {"description": "Close a bug as fixed",
                            "parameters": obj({"issue_id": text}, ["issue_id"])},
            "team_velocity": {"description": "Story points a team finished last sprint",  # distractor
                              "parameters": obj({"team": text}, ["team"])}}
        self._user_messages = [f"Create a release issue titled '{self._title}'.",
                               f"Link every open blocker bug of the {self._component} component to that release.",
                               "Move the release to testing.",
                               "Close all the bugs linked to the release.",
                               "Ship the release."]
        self._message_criteria = [lambda s: self._release(s) is not None,
                                  lambda s: self._field(s, "links") == sorted(self._blockers),
                                  lambda s: self._field(s, "status") == "testing",
                                  lambda s: all(s["issues"][b]["status"] == "closed" for b in self._blockers),
                                  lambda s: self._field(s, "status") == "shipped"]
        self._current_msg, self._expected_answer = 0, "done"
        return self._user_messages[0], {}

    def _release(self, s):
        return next((i for i, v in s["issues"].items() if v["kind"] == "release" and v["title"] == self._title), None)

    def _field(self, s, key):
        rel = self._release(s)
        return None if rel is None else (sorted(s["issues"][rel][key]) if key == "links" else s["issues"][rel][key])

    def _advance_if_done(self):
        if self._current_msg >= len(self._user_messages):
            return ""
        if not self._message_criteria[self._current_msg](self._state):
            return ""
        self._current_msg += 1
        if self._current_msg == len(self._user_messages):
            return "\n\n[ALL STEPS COMPLETE] Submit <answer>done</answer>."
        return f"\n\n[STEP {self._current_msg} COMPLETE - NEW INSTRUCTION] {self._user_messages[self._current_msg]}"

    def _check_answer(self, answer):
        return str(answer).strip().lower() == "done" and self._current_msg >= len(self._user_messages)

    def _get(self, issue_id):
        return self._state["issues"].get(str(issue_id).strip().upper())

    def tool_create_issue(self, title="", kind="bug"):
        if kind not in ("bug", "feature", "release") or not str(title).strip():
            return "Error: a title and a valid kind are required" + self._advance_if_done()
        prefix = {"bug": "BUG", "feature": "FEAT", "release": "REL"}[kind]
        new_id = f"{prefix}-{500 + len(self._state['issues'])}"
        self._state["issues"][new_id] = {"kind": kind, "title": str(title).strip().strip("'\""), "component": None,
                                         "labels": [], "status": "todo" if kind == "release" else "open", "links": []}
        return f"Created {kind} {new_id}" + self._advance_if_done()

    def tool_list_issues(self, component="", label=""):
        rows = [f"{i} [{v['status']}] labels: {', '.join(v['labels'])}" for i, v in self._state["issues"].items()
                if v["component"] == component and str(label).strip().lower() in v["labels"]]
        return ("\n".join(rows) or "No matching issues.") + self._advance_if_done()

    def tool_link_issue(self, release_id="", issue_id=""):
        rel, bug = self._get(release_id), self._get(issue_id)
        if rel is None or rel["kind"] != "release" or bug is None or bug["kind"] != "bug":
            return "Error: need a release id and a bug id" + self._advance_if_done()
        if rel["status"] != "todo":
            return "Error: links can only change while the release is in todo" + self._advance_if_done()
        if str(issue_id).strip().upper() not in rel["links"]:
            rel["links"].append(str(issue_id).strip().upper())
        return f"Linked {issue_id} to {release_id}" + self._advance_if_done()

    def tool_transition(self, issue_id="", status=""):
        rel = self._get(issue_id)
        if rel is None or rel["kind"] != "release" or NEXT_STATUS.get(rel["status"]) != status:
            return "Error: releases move todo -> testing -> shipped, one step at a time" + self._advance_if_done()
        if status == "testing" and not rel["links"]:
            return "Error: link the release's bugs before testing" + self._advance_if_done()
        if status == "shipped" and any(self._get(b)["status"] != "closed" for b in rel["links"]):
            return "Error: every linked bug must be closed before shipping" + self._advance_if_done()
        rel["status"] = status
        return f"{issue_id} is now {status}" + self._advance_if_done()

    def tool_close_issue(self, issue_id=""):
        bug = self._get(issue_id)
        if bug is None or bug["kind"] != "bug":
            return f"Error: no bug {issue_id}" + self._advance_if_done()
        bug["status"] = "closed"
        return f"{issue_id} closed" + self._advance_if_done()

    def tool_team_velocity(self, team=""):
        return f"Team {team}: 34 points last sprint" + self._advance_if_done()

    def solution(self):
        bugs = ", ".join(sorted(self._blockers))
        return (f"create_issue('{self._title}', release) -> list_issues({self._component}, blocker) -> link each of "
                f"[{bugs}] -> transition(testing) -> close each -> transition(shipped) -> <answer>done</answer>")
