"""Look up a customer's oldest open support ticket, route it to today's agent, and act on its priority."""
import random
from typing import Tuple

CUSTOMERS = ["acme", "globex", "initech", "umbrella", "hooli", "vandelay"]
AGENTS = ["priya", "sam", "lena", "omar", "june", "felix", "rita"]
DAYS = ["monday", "tuesday", "wednesday", "thursday", "friday"]


class SupportDeskEnv(ToolUseBaseEnv):
    def reset(self, seed=None) -> Tuple[str, dict]:
        rng = random.Random(seed)
        self.turn_count, self._call_history = 0, []
        customer = rng.choice(CUSTOMERS)
        tickets = {}
        for k, day in enumerate(rng.sample(range(1, 29), 12)):  # distinct dates: "oldest" is unique
            who = customer if k < 4 else rng.choice(CUSTOMERS)
            status = "open" if k < 2 else rng.choice(["open", "closed"])
            tickets[f"T-{rng.randint(10, 99)}{k}"] = {
                "customer": who, "status": status, "opened": f"2024-03-{day:02d}", "assignee": None,
                "priority": rng.choice(["low", "normal", "high", "high"]), "escalated": False, "notes": []}
        self._state = {"tickets": tickets, "roster": dict(zip(DAYS, rng.sample(AGENTS, 5))), "viewed": None}
        self._target = min((t for t, v in tickets.items() if v["customer"] == customer and v["status"] == "open"),
                           key=lambda t: tickets[t]["opened"])
        self._day = rng.choice(DAYS)
        obj = lambda props, req: {"type": "object", "properties": props, "required": req}
        text = {"type": "string"}
        self._tools = {
            "list_tickets": {"description": "List a customer's tickets (id, opened date, status)",
                             "parameters": obj({"customer": text, "status": {"type": "string",
                                                "enum": ["open", "closed", "all"]}}, ["customer", "status"])},
            "get_ticket": {"description": "Show one ticket's full details, including priority",
                           "parameters": obj({"ticket_id": text}, ["ticket_id"])},
            "get_roster": {"description": "Which support agent is on duty on a weekday",
                           "parameters": obj({"day": {"type": "string", "enum": DAYS}}, ["day"])},
            "assign_ticket": {"description": "Assign a ticket to a support agent",
                              "parameters": obj({"ticket_id": text, "agent": text}, ["ticket_id", "agent"])},
            "escalate_ticket": {"description": "Escalate a ticket to the on-call engineer",
                                "parameters": obj({"ticket_id": text}, ["ticket_id"])},
            "add_note": {"description": "Add an internal note to a ticket",
                         "parameters": obj({"ticket_id": text, "text": text}, ["ticket_id", "text"])},
            "sla_policy": {"description": "Describe the response-time policy for a priority",  # distractor
                           "parameters": obj({"priority": {"type": "string",
                                              "enum": ["low", "normal", "high"]}}, ["priority"])}}
        self._user_messages = [
            f"Find {customer.title()}'s oldest open ticket and open its details.",
            f"Assign that ticket to whoever is on duty on {self._day.title()}.",
            "If the ticket is high priority, escalate it; otherwise add the note 'queued' to it."]
        high = tickets[self._target]["priority"] == "high"
        self._message_criteria = [
            lambda s: s["viewed"] == self._target,
            lambda s: s["tickets"][self._target]["assignee"] == s["roster"][self._day],
            lambda s: s["tickets"][self._target]["escalated"] == high
            and ("queued" in s["tickets"][self._target]["notes"]) != high]
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

    def _ticket(self, ticket_id):
        return self._state["tickets"].get(str(ticket_id).strip().upper())

    def tool_list_tickets(self, customer="", status="all"):
        rows = [f"{t} opened {v['opened']} ({v['status']})" for t, v in self._state["tickets"].items()
                if v["customer"] == str(customer).strip().lower() and status in ("all", v["status"])]
        return ("\n".join(rows) or "No matching tickets.") + self._advance_if_done()

    def tool_get_ticket(self, ticket_id=""):
        t = self._ticket(ticket_id)
        if t is None:
            return f"Error: no ticket {ticket_id}" + self._advance_if_done()
        self._state["viewed"] = str(ticket_id).strip().upper()
        return (f"{ticket_id}: customer {t['customer']}, opened {t['opened']}, status {t['status']}, "
                f"priority {t['priority']}, assignee {t['assignee']}") + self._advance_if_done()

    def tool_get_roster(self, day=""):
        agent = self._state["roster"].get(str(day).strip().lower())
        return (f"On duty {day}: {agent}" if agent else "Error: unknown day") + self._advance_if_done()

    def tool_assign_ticket(self, ticket_id="", agent=""):
        t, name = self._ticket(ticket_id), str(agent).strip().lower()
        if t is None or name not in AGENTS:
            return "Error: unknown ticket or agent" + self._advance_if_done()
        t["assignee"] = name
        return f"{ticket_id} assigned to {name}" + self._advance_if_done()

    def tool_escalate_ticket(self, ticket_id=""):
        t = self._ticket(ticket_id)
        if t is None:
            return f"Error: no ticket {ticket_id}" + self._advance_if_done()
        t["escalated"] = True
        return f"{ticket_id} escalated to on-call" + self._advance_if_done()

    def tool_add_note(self, ticket_id="", text=""):
        t = self._ticket(ticket_id)
        if t is None:
            return f"Error: no ticket {ticket_id}" + self._advance_if_done()
        t["notes"].append(str(text).strip().strip("'\"").lower())
        return f"Note added to {ticket_id}" + self._advance_if_done()

    def tool_sla_policy(self, priority="normal"):
        hours = {"low": 72, "normal": 24, "high": 4}.get(priority, 24)
        return f"{priority} tickets get a first response within {hours} hours" + self._advance_if_done()

    def solution(self):
        act = "escalate_ticket" if self._state["tickets"][self._target]["priority"] == "high" else "add_note('queued')"
        return (f"list_tickets(open) -> get_ticket({self._target}) -> get_roster({self._day}) -> "
                f"assign_ticket({self._target}, {self._state['roster'][self._day]}) -> {act} -> <answer>done</answer>")
