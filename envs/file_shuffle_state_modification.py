"""Archive the largest CSV in an inbox through a chain of dependent file-system changes."""
import random
from typing import Tuple

STEMS = ["sales", "budget", "leads", "payroll", "stock", "orders", "survey", "traffic", "memo", "invoice"]
FOLDERS = ["archive", "vault", "q3-final", "backup", "cold-storage"]


class FileShuffleEnv(ToolUseBaseEnv):
    def reset(self, seed=None) -> Tuple[str, dict]:
        rng = random.Random(seed)
        self.turn_count, self._call_history = 0, []
        exts = ["csv", "csv", "csv"] + [rng.choice(["csv", "txt", "pdf"]) for _ in range(4)]
        sizes = rng.sample(range(5, 900), len(exts))  # distinct, so "the largest" is unambiguous
        files = {f"/inbox/{stem}.{ext}": {"id": k, "size_kb": size, "mode": "read-write"}
                 for k, (stem, ext, size) in enumerate(zip(rng.sample(STEMS, len(exts)), exts, sizes))}
        self._state = {"dirs": ["/", "/inbox"], "files": files}
        self._target = max((v for p, v in files.items() if p.endswith(".csv")), key=lambda v: v["size_kb"])["id"]
        self._folder = "/" + rng.choice(FOLDERS)
        self._new_name = f"{rng.choice(STEMS)}-{rng.randint(2019, 2024)}.csv"
        obj = lambda props, req: {"type": "object", "properties": props, "required": req}
        text = {"type": "string"}
        self._tools = {
            "list_dir": {"description": "List the files in a folder with their sizes in KB",
                         "parameters": obj({"path": text}, ["path"])},
            "make_dir": {"description": "Create a top-level folder such as /reports",
                         "parameters": obj({"path": text}, ["path"])},
            "move_file": {"description": "Move a file into an existing folder",
                          "parameters": obj({"path": text, "folder": text}, ["path", "folder"])},
            "rename_file": {"description": "Rename a file inside its folder",
                            "parameters": obj({"path": text, "new_name": text}, ["path", "new_name"])},
            "set_mode": {"description": "Change a file's permissions",
                         "parameters": obj({"path": text, "mode": {"type": "string",
                                            "enum": ["read-only", "read-write"]}}, ["path", "mode"])},
            "disk_usage": {"description": "Total disk usage of the drive",               # distractor
                           "parameters": obj({}, [])}}
        self._user_messages = [f"Create a folder {self._folder}.",
                               f"Move the largest .csv file in /inbox into {self._folder}.",
                               f"Rename that file to {self._new_name}.",
                               "Make the renamed file read-only."]
        self._message_criteria = [lambda s: self._folder in s["dirs"],
                                  lambda s: any(p.startswith(self._folder + "/") for p in self._paths_of_target(s)),
                                  lambda s: f"{self._folder}/{self._new_name}" in self._paths_of_target(s),
                                  lambda s: any(s["files"][p]["mode"] == "read-only"
                                                and p.endswith("/" + self._new_name) for p in self._paths_of_target(s))]
        self._current_msg, self._expected_answer = 0, "done"
        return self._user_messages[0], {}

    def _paths_of_target(self, s):
        return [p for p, v in s["files"].items() if v["id"] == self._target]

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

    def tool_list_dir(self, path="/"):
        folder = "/" + str(path).strip().strip("/")
        if folder not in self._state["dirs"]:
            return f"Error: no folder {path}" + self._advance_if_done()
        rows = [f"{p.rsplit('/', 1)[1]}  {v['size_kb']} KB  {v['mode']}"
                for p, v in sorted(self._state["files"].items()) if p.rsplit("/", 1)[0] == folder.rstrip("/")]
        subdirs = [d + "/" for d in self._state["dirs"] if folder == "/" and d != "/"]
        return ("\n".join(subdirs + rows) or "(empty)") + self._advance_if_done()

    def tool_make_dir(self, path=""):
        folder = "/" + str(path).strip().strip("/")
        if folder == "/" or "/" in folder[1:] or folder in self._state["dirs"]:
            return f"Error: cannot create {path} (exists or not top-level)" + self._advance_if_done()
        self._state["dirs"].append(folder)
        return f"Created {folder}" + self._advance_if_done()

    def tool_move_file(self, path="", folder=""):
        src, dest = str(path).strip(), "/" + str(folder).strip().strip("/")
        if src not in self._state["files"]:
            return f"Error: no file {path}" + self._advance_if_done()
        if dest not in self._state["dirs"]:
            return f"Error: folder {folder} does not exist; create it first" + self._advance_if_done()
        new_path = dest.rstrip("/") + "/" + src.rsplit("/", 1)[1]
        self._state["files"][new_path] = self._state["files"].pop(src)
        return f"Moved {src} to {new_path}" + self._advance_if_done()

    def tool_rename_file(self, path="", new_name=""):
        src, name = str(path).strip(), str(new_name).strip()
        if src not in self._state["files"] or not name or "/" in name:
            return "Error: no such file or invalid new name" + self._advance_if_done()
        new_path = src.rsplit("/", 1)[0] + "/" + name
        if new_path in self._state["files"]:
            return f"Error: {new_path} already exists" + self._advance_if_done()
        self._state["files"][new_path] = self._state["files"].pop(src)
        return f"Renamed to {new_path}" + self._advance_if_done()

    def tool_set_mode(self, path="", mode=""):
        if str(path).strip() not in self._state["files"] or mode not in ("read-only", "read-write"):
            return "Error: no such file or invalid mode" + self._advance_if_done()
        self._state["files"][str(path).strip()]["mode"] = mode
        return f"{path} is now {mode}" + self._advance_if_done()

    def tool_disk_usage(self):
        used = sum(v["size_kb"] for v in self._state["files"].values())
        return f"{used} KB used of 1048576 KB" + self._advance_if_done()

    def solution(self):
        return (f"list_dir(/inbox) -> make_dir({self._folder}) -> move_file(<largest csv>, {self._folder}) -> "
                f"rename_file(..., {self._new_name}) -> set_mode(..., read-only) -> <answer>done</answer>")
