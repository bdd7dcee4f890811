"""Pick the cheapest shipping service that meets an order's weight, zone and deadline, then notify."""
import random
from typing import Tuple

# name: (price in USD, days to deliver, max kg or None, local zone only)
SERVICES = {"ground": (6, 5, 30, False), "air": (22, 2, 10, False),
            "freight": (30, 4, None, False), "courier": (40, 1, 20, True)}


def best_service(weight, zone, deadline):
    """Cheapest service that can carry the order and arrives within the deadline (None if none can)."""
    fits = [(price, name) for name, (price, days, max_kg, local) in SERVICES.items()
            if days <= deadline and (max_kg is None or weight <= max_kg) and (zone == "local" or not local)]
    return min(fits)[1] if fits else None


class ShippingChoiceEnv(ToolUseBaseEnv):
    def reset(self, seed=None) -> Tuple[str, dict]:
        rng = random.Random(seed)
        self.turn_count, self._call_history = 0, []
        orders = {}
        for _ in range(6):
            order = {"weight_kg": rng.randint(1, 40), "zone": rng.choice(["local", "national"]),
                     "deadline_days": rng.randint(1, 6), "channel": rng.choice(["email", "sms"]), "service": None}
            orders[f"O-{rng.randint(1000, 9999)}"] = order
        self._order = rng.choice(sorted(orders))
        t = orders[self._order]
        while best_service(t["weight_kg"], t["zone"], t["deadline_days"]) is None:
            t["deadline_days"] += 1  # freight (4 days, any weight) always works eventually
        self._state = {"orders": orders, "viewed": None, "notified": []}
        self._best = best_service(t["weight_kg"], t["zone"], t["deadline_days"])
        obj = lambda props, req: {"type": "object", "properties": props, "required": req}
        order_id = obj({"order_id": {"type": "string"}}, ["order_id"])
        self._tools = {"get_order": {"description": "Show an order's weight, zone, deadline and the "
                                                    "customer's preferred contact channel", "parameters": order_id}}
        for name, (price, days, max_kg, local) in SERVICES.items():
            limits = f"up to {max_kg} kg" if max_kg else "any weight"
            self._tools[f"ship_{name}"] = {"description": f"Ship an order by {name}: ${price}, arrives in "
                                           f"{days} day(s), {limits}{', local zone only' if local else ''}",
                                           "parameters": order_id}
        self._tools["cancel_shipment"] = {"description": "Cancel an order's shipment so it can be re-shipped",
                                          "parameters": order_id}
        self._tools["notify_customer"] = {"description": "Send the tracking number to the customer",
                                          "parameters": obj({"order_id": {"type": "string"}, "channel": {
                                              "type": "string", "enum": ["email", "sms"]}}, ["order_id", "channel"])}
        self._tools["store_hours"] = {"description": "Opening hours of a store",               # distractor
                                      "parameters": obj({"city": {"type": "string"}}, ["city"])}
        self._user_messages = [f"A customer is asking about order {self._order}. Look it up.",
                               "Ship it with the cheapest service that delivers within its deadline.",
                               "Send the customer the tracking number through their preferred channel."]
        self._message_criteria = [lambda s: s["viewed"] == self._order,
                                  lambda s: s["orders"][self._order]["service"] == self._best,
                                  lambda s: (self._order, s["orders"][self._order]["channel"]) in s["notified"]]
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

    def tool_get_order(self, order_id=""):
        o = self._state["orders"].get(str(order_id).strip().upper())
        if o is None:
            return f"Error: no order {order_id}" + self._advance_if_done()
        self._state["viewed"] = str(order_id).strip().upper()
        return (f"Order {order_id}: {o['weight_kg']} kg, {o['zone']} zone, must arrive within "
                f"{o['deadline_days']} day(s), customer prefers {o['channel']}, shipped by "
                f"{o['service'] or 'nothing yet'}") + self._advance_if_done()

    def _ship(self, order_id, name):
        o = self._state["orders"].get(str(order_id).strip().upper())
        _, days, max_kg, local = SERVICES[name]
        if o is None:
            return f"Error: no order {order_id}"
        if o["service"]:
            return f"Error: already shipped by {o['service']}; cancel the shipment first"
        if (max_kg is not None and o["weight_kg"] > max_kg) or (local and o["zone"] != "local"):
            return f"Error: {name} cannot carry this order"
        o["service"] = name
        return f"Order {order_id} shipped by {name}, tracking number TRK{str(order_id)[-4:]}{name[0].upper()}"

    def tool_ship_ground(self, order_id=""):
        return self._ship(order_id, "ground") + self._advance_if_done()

    def tool_ship_air(self, order_id=""):
        return self._ship(order_id, "air") + self._advance_if_done()

    def tool_ship_freight(self, order_id=""):
        return self._ship(order_id, "freight") + self._advance_if_done()

    def tool_ship_courier(self, order_id=""):
        return self._ship(order_id, "courier") + self._advance_if_done()

    def tool_cancel_shipment(self, order_id=""):
        o = self._state["orders"].get(str(order_id).strip().upper())
        if o is None or not o["service"]:
            return "Error: no shipment to cancel" + self._advance_if_done()
        o["service"] = None
        return f"Shipment of {order_id} cancelled" + self._advance_if_done()

    def tool_notify_customer(self, order_id="", channel=""):
        o = self._state["orders"].get(str(order_id).strip().upper())
        if o is None or not o["service"] or channel not in ("email", "sms"):
            return "Error: unknown order, not shipped yet, or bad channel" + self._advance_if_done()
        self._state["notified"].append((str(order_id).strip().upper(), channel))
        return f"Tracking number sent by {channel}" + self._advance_if_done()

    def tool_store_hours(self, city=""):
        return f"{city} store: 9:00-18:00, Monday to Saturday" + self._advance_if_done()

    def solution(self):
        return (f"get_order({self._order}) -> ship_{self._best}({self._order}) -> notify_customer("
                f"{self._order}, {self._state['orders'][self._order]['channel']}) -> <answer>done</answer>")
