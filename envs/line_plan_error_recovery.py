"""Change a phone line's plan through whatever errors the billing system raises, then verify and notify."""
import random
from typing import Tuple

PLANS = ["basic", "plus", "unlimited"]


class LinePlanEnv(ToolUseBaseEnv):
    def reset(self, seed=None) -> Tuple[str, dict]:
        rng = random.Random(seed)
        self.turn_count, self._call_history = 0, []
        numbers = [f"555-{rng.randint(1000, 9999)}" for _ in range(3)]
        lines = {n: {"plan": rng.choice(PLANS), "status": "active"} for n in numbers}
        self._line = rng.choice(numbers)
        self._plan = rng.choice([p for p in PLANS if p != lines[self._line]["plan"]])
        # One or two hidden obstacles; change_plan reports them one at a time, most urgent first.
        blocks = rng.sample(["order", "balance", "suspended"], rng.randint(1, 2))
        if "suspended" in blocks:
            lines[self._line]["status"] = "suspended"
        self._state = {"lines": lines, "verified": False, "sms": [],
                       "balance_due": rng.randint(1500, 9000) / 100 if "balance" in blocks else 0.0,
                       "pending_order": f"ORD-{rng.randint(10000, 99999)}" if "order" in blocks else None}
        obj = lambda props, req: {"type": "object", "properties": props, "required": req}
        line = {"type": "string", "description": "phone number like 555-1234"}
        self._tools = {
            "get_line": {"description": "Show a line's plan and status",
                         "parameters": obj({"line_number": line}, ["line_number"])},
            "change_plan": {"description": "Move a line to another plan",
                            "parameters": obj({"line_number": line, "plan": {"type": "string", "enum": PLANS}},
                                              ["line_number", "plan"])},
            "pay_balance": {"description": "Pay the account's outstanding balance (exact amount)",
                            "parameters": obj({"amount": {"type": "number"}}, ["amount"])},
            "reactivate_line": {"description": "Reactivate a suspended line",
                                "parameters": obj({"line_number": line, "reason": {"type": "string",
                                                   "enum": ["customer_request", "payment_received"]}},
                                                  ["line_number", "reason"])},
            "cancel_order": {"description": "Cancel a pending order on the account",
                             "parameters": obj({"order_id": {"type": "string"}}, ["order_id"])},
            "send_sms": {"description": "Send a templated text message to a line",
                         "parameters": obj({"line_number": line, "template": {"type": "string",
                                            "enum": ["plan_changed", "payment_received", "outage"]}},
                                           ["line_number", "template"])},
            "check_coverage": {"description": "Network coverage at a postcode",          # distractor
                               "parameters": obj({"postcode": {"type": "string"}}, ["postcode"])}}
        self._user_messages = [f"Please switch line {self._line} to the {self._plan} plan.",
                               "Check the line's details to confirm the new plan is active.",
                               "Text the customer on that line that their plan has changed."]
        self._message_criteria = [lambda s: s["lines"][self._line]["plan"] == self._plan,
                                  lambda s: s["verified"],
                                  lambda s: (self._line, "plan_changed") in s["sms"]]
        self._current_msg, self._expected_answer = 0, "done"
        return self._user_messages[0], {}

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

    def tool_get_line(self, line_number=""):
        info = self._state["lines"].get(str(line_number).strip())
        if info is None:
            return f"Error: no line {line_number} on this account" + self._advance_if_done()
        if str(line_number).strip() == self._line and info["plan"] == self._plan and info["status"] == "active":
            self._state["verified"] = True
        return f"Line {line_number}: plan {info['plan']}, status {info['status']}" + self._advance_if_done()

    def tool_change_plan(self, line_number="", plan=""):
        info = self._state["lines"].get(str(line_number).strip())
        if info is None or plan not in PLANS:
            return "Error 404: unknown line or plan" + self._advance_if_done()
        if self._state["pending_order"]:
            return (f"Error 409: order {self._state['pending_order']} is still pending on this account; "
                    "cancel it before changing plans") + self._advance_if_done()
        if self._state["balance_due"] > 0:
            return (f"Error 402: outstanding balance of {self._state['balance_due']:.2f} must be paid "
                    "first") + self._advance_if_done()
        if info["status"] != "active":
            return "Error 423: the line is suspended; reactivate it first" + self._advance_if_done()
        info["plan"] = plan
        return f"Line {line_number} moved to the {plan} plan" + self._advance_if_done()

    def tool_pay_balance(self, amount=0):
        try:
            paid = float(amount)
        except (TypeError, ValueError):
            return "Error: amount must be a number" + self._advance_if_done()
        due = self._state["balance_due"]
        if due <= 0 or not abs(paid - due) <= 0.005:  # "not <=" also rejects NaN
            return f"Error: payment must equal the outstanding balance ({due:.2f})" + self._advance_if_done()
        self._state["balance_due"] = 0.0
        return f"Payment of {due:.2f} received; balance is 0.00" + self._advance_if_done()

    def tool_reactivate_line(self, line_number="", reason=""):
        info = self._state["lines"].get(str(line_number).strip())
        if info is None or reason not in ("customer_request", "payment_received"):
            return "Error: unknown line or reason" + self._advance_if_done()
        info["status"] = "active"
        return f"Line {line_number} is active" + self._advance_if_done()

    def tool_cancel_order(self, order_id=""):
        if not self._state["pending_order"] or str(order_id).strip().upper() != self._state["pending_order"]:
            return f"Error: no pending order {order_id}" + self._advance_if_done()
        self._state["pending_order"] = None
        return f"Order {order_id} cancelled" + self._advance_if_done()

    def tool_send_sms(self, line_number="", template=""):
        templates = ("plan_changed", "payment_received", "outage")
        if str(line_number).strip() not in self._state["lines"] or template not in templates:
            return "Error: unknown line or template" + self._advance_if_done()
        self._state["sms"].append((str(line_number).strip(), template))
        return f"Sent '{template}' text to {line_number}" + self._advance_if_done()

    def tool_check_coverage(self, postcode=""):
        return f"5G available at {postcode}" + self._advance_if_done()

    def solution(self):
        return (f"change_plan({self._line}, {self._plan}) -> fix each error (cancel_order / pay_balance / "
                f"reactivate_line) and retry -> get_line({self._line}) -> send_sms({self._line}, plan_changed) "
                "-> <answer>done</answer>")
