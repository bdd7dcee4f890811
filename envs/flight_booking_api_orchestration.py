"""Book the cheapest flight on a route by chaining search, hold, payment and itinerary calls."""
import random
from typing import Tuple

CITIES = ["lisbon", "oslo", "rome", "vienna", "dublin", "prague"]
PEOPLE = ["mira", "tomas", "ines", "karl", "noor", "pablo"]


class FlightBookingEnv(ToolUseBaseEnv):
    def reset(self, seed=None) -> Tuple[str, dict]:
        rng = random.Random(seed)
        self.turn_count, self._call_history = 0, []
        origin, dest = rng.sample(CITIES, 2)
        prices = rng.sample(range(60, 400), 10)  # distinct, so "the cheapest" is unambiguous
        flights = {}
        for k, price in enumerate(prices):
            frm, to = (origin, dest) if k < 4 else rng.sample(CITIES, 2)
            flights[f"FL{rng.randint(10, 99)}{k}"] = {"from": frm, "to": to, "price": price}
        self._state = {"flights": flights, "holds": {}, "tickets": {}, "emails": []}
        on_route = [f for f, v in flights.items() if (v["from"], v["to"]) == (origin, dest)]
        self._flight = min(on_route, key=lambda f: flights[f]["price"])
        self._cabin, self._card = rng.choice(["economy", "business"]), rng.choice(["corporate", "personal"])
        self._email = f"{rng.choice(PEOPLE)}{rng.randint(1, 99)}@example.com"
        obj = lambda props, req: {"type": "object", "properties": props, "required": req}
        text = {"type": "string"}
        self._tools = {
            "search_flights": {"description": "List flights (id, route, price in EUR) between two cities",
                               "parameters": obj({"origin": text, "destination": text}, ["origin", "destination"])},
            "hold_seat": {"description": "Hold a seat on a flight; returns a hold id",
                          "parameters": obj({"flight_id": text, "cabin": {"type": "string",
                                             "enum": ["economy", "business"]}}, ["flight_id", "cabin"])},
            "pay_hold": {"description": "Pay for a hold with a stored card; returns a ticket id",
                         "parameters": obj({"hold_id": text, "card": {"type": "string",
                                            "enum": ["corporate", "personal"]}}, ["hold_id", "card"])},
            "send_itinerary": {"description": "Email the itinerary of a ticket",
                               "parameters": obj({"ticket_id": text, "email": text}, ["ticket_id", "email"])},
            "city_weather": {"description": "Current weather in a city",                 # distractor
                             "parameters": obj({"city": text}, ["city"])},
            "loyalty_points": {"description": "Loyalty points of a member number",       # distractor
                               "parameters": obj({"member_id": text}, ["member_id"])}}
        self._user_messages = [
            f"Hold a {self._cabin} seat on the cheapest flight from {origin.title()} to {dest.title()}.",
            f"Pay for that hold with the {self._card} card.",
            f"Email the itinerary of the new ticket to {self._email}."]
        self._message_criteria = [lambda s: bool(self._good_holds(s)),
                                  lambda s: bool(self._good_tickets(s)),
                                  lambda s: any(t in self._good_tickets(s) and to == self._email
                                                for t, to in s["emails"])]
        self._current_msg, self._expected_answer = 0, "done"
        return self._user_messages[0], {}

    def _good_holds(self, s):
        return {h for h, held in s["holds"].items() if held == (self._flight, self._cabin)}

    def _good_tickets(self, s):
        return {t for t, (h, card) in s["tickets"].items() if h in self._good_holds(s) and card == self._card}

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

    def tool_search_flights(self, origin="", destination=""):
        route = (str(origin).strip().lower(), str(destination).strip().lower())
        found = [f"{f}: {v['from'].title()} -> {v['to'].title()}, {v['price']} EUR"
                 for f, v in self._state["flights"].items() if (v["from"], v["to"]) == route]
        return ("\n".join(found) or "No flights on that route.") + self._advance_if_done()

    def tool_hold_seat(self, flight_id="", cabin=""):
        if flight_id not in self._state["flights"] or cabin not in ("economy", "business"):
            return "Error: unknown flight id or cabin" + self._advance_if_done()
        hold_id = f"H{len(self._state['holds']) + 301}"
        self._state["holds"][hold_id] = (flight_id, cabin)
        return f"Hold {hold_id} created: {cabin} seat on {flight_id}" + self._advance_if_done()

    def tool_pay_hold(self, hold_id="", card=""):
        if hold_id not in self._state["holds"] or card not in ("corporate", "personal"):
            return "Error: unknown hold id or card" + self._advance_if_done()
        if any(h == hold_id for h, _ in self._state["tickets"].values()):
            return f"Error: hold {hold_id} is already paid" + self._advance_if_done()
        ticket_id = f"TK{len(self._state['tickets']) + 7001}"
        self._state["tickets"][ticket_id] = (hold_id, card)
        return f"Paid with the {card} card. Ticket {ticket_id} issued" + self._advance_if_done()

    def tool_send_itinerary(self, ticket_id="", email=""):
        if ticket_id not in self._state["tickets"] or "@" not in str(email):
            return "Error: unknown ticket id or invalid email" + self._advance_if_done()
        self._state["emails"].append((ticket_id, str(email).strip().lower()))
        return f"Itinerary for {ticket_id} sent to {email}" + self._advance_if_done()

    def tool_city_weather(self, city=""):
        return f"{city}: mild, light wind" + self._advance_if_done()

    def tool_loyalty_points(self, member_id=""):
        return f"Member {member_id}: 1200 points" + self._advance_if_done()

    def solution(self):
        return (f"search_flights -> hold_seat({self._flight}, {self._cabin}) -> pay_hold(<hold id>, "
                f"{self._card}) -> send_itinerary(<ticket id>, {self._email}) -> <answer>done</answer>")
