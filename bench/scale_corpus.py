"""Deterministic bilingual (English/German) text for the scale bench: memory cards, chat messages, queries.

Sentences come from templates whose slots draw from vocabularies with Zipf-like popularity (rank^-1.1
after a seeded shuffle), so a few words are everywhere and most are rare, as in real memories: common
nouns and weekdays, a long tail of synthetic project codenames, people (first x last name), ticket
numbers. The same seed and index always give the same text (no database, no global state), which is
what lets bench/scale.py cache the vectors of a corpus on disk.
"""

from __future__ import annotations

import bisect
import itertools
import random
from collections.abc import Sequence
from dataclasses import dataclass

CORPUS_VERSION = 1  # bump when templates or vocabularies change: cached vectors are keyed by it

FIRST = """
Anna Ben Clara David Emma Felix Greta Hannah Jonas Lena Lukas Marie Max Mia Noah Paul Sophie Tim Lea
Finn Olivia James Liam Ava Ethan Chloe Lucas Grace Oliver Ruby Jack Isla Henry Freya Leo Alice Oscar
Ella Samuel Nora Karl Ute Jürgen Birgit Wolfgang Heike Dieter Sabine Matthias Katrin Priya Arjun Mei
Kenji Sofia Mateo Amara Tariq Ingrid Lars
""".split()
LAST = """
Müller Schmidt Schneider Fischer Weber Meyer Wagner Becker Schulz Hoffmann Koch Richter Wolf Klein
Schröder Neumann Braun Zimmermann Hartmann Krüger Smith Jones Taylor Brown Williams Wilson Johnson
Davies Evans Thomas Roberts Walker Wright Robinson Thompson White Hughes Edwards Green Hall Wood
Harris Clarke Patel Nguyen Kowalski Rossi Novak Jensen Lindqvist Haas Vogel Lange Jung Frank Berger
Keller
""".split()
CITIES = """
Berlin Hamburg München Köln Frankfurt Stuttgart Leipzig Dresden Bremen Hannover Nürnberg Freiburg
Heidelberg Münster Bonn Kiel Rostock Augsburg London Manchester Leeds Bristol Edinburgh Dublin
Boston Chicago Seattle Denver Austin Toronto Vancouver Lisbon Porto Madrid Vienna Zurich Basel
Amsterdam Rotterdam Copenhagen Oslo Stockholm Prague Warsaw Krakow Budapest Milan Turin Lyon
""".split()
TOOLS = """
PostgreSQL Redis Kafka Kubernetes Docker Terraform Ansible Grafana Prometheus Jenkins GitLab GitHub
Jira Confluence Slack Figma Django React Vue Svelte Rust Go Python TypeScript Java Kotlin Swift
Spark Airflow dbt Snowflake BigQuery Elasticsearch RabbitMQ Celery Nginx Vault Sentry Datadog Excel
SAP Salesforce Notion Miro Zoom Teams Okta Stripe
""".split()
FOODS_EN = """
coriander peanuts shellfish mushrooms olives tofu eggplant okra anchovies walnuts lactose gluten
sesame celery mustard garlic onions chili pork beef lamb salmon tuna shrimp avocado spinach kale
lentils chickpeas quinoa oats rye almonds cashews hazelnuts coconut pineapple mango kiwi
strawberries blueberries raisins dates honey cinnamon ginger turmeric paprika basil oregano thyme
rosemary dill cheddar brie feta mozzarella yogurt butter cream eggs
""".split()
FOODS_DE = """
Koriander Erdnüsse Meeresfrüchte Pilze Oliven Tofu Auberginen Sardellen Walnüsse Laktose Gluten
Sesam Sellerie Senf Knoblauch Zwiebeln Chili Schweinefleisch Rindfleisch Lamm Lachs Thunfisch
Garnelen Avocado Spinat Grünkohl Linsen Kichererbsen Haferflocken Roggen Mandeln Haselnüsse Kokos
Ananas Mango Erdbeeren Heidelbeeren Rosinen Datteln Honig Zimt Ingwer Kurkuma Paprika Basilikum
Thymian Rosmarin Dill Feta Mozzarella Joghurt Butter Sahne Eier Sauerkraut Rote Bete Spargel
Rhabarber
""".split()
TOPICS_EN = """
release deployment migration invoice budget roadmap onboarding review retrospective standup contract
audit backup rollout hotfix dashboard newsletter workshop offsite hiring interview forecast report
presentation campaign launch pricing renewal support escalation incident outage latency billing
compliance security training certification vacation travel expense reimbursement schedule meeting
deadline milestone sprint backlog estimate prototype benchmark survey feedback
""".split()
TOPICS_DE = """
Freigabe Bereitstellung Migration Rechnung Budget Fahrplan Einarbeitung Prüfung Rückblick
Tagesbesprechung Vertrag Revision Sicherung Einführung Fehlerbehebung Übersicht Rundschreiben
Workshop Klausur Einstellung Vorstellungsgespräch Prognose Bericht Präsentation Kampagne
Markteinführung Preisgestaltung Verlängerung Kundendienst Eskalation Störung Ausfall Abrechnung
Datenschutz Sicherheit Schulung Zertifizierung Urlaub Dienstreise Spesen Erstattung Termin
Besprechung Frist Meilenstein Sprint Rückstand Schätzung Prototyp Umfrage Rückmeldung
""".split()
WEEKDAYS_EN = "Monday Tuesday Wednesday Thursday Friday Saturday Sunday".split()
WEEKDAYS_DE = "Montag Dienstag Mittwoch Donnerstag Freitag Samstag Sonntag".split()
MONTHS_EN = "January February March April May June July August September October November December".split()
MONTHS_DE = "Januar Februar März April Mai Juni Juli August September Oktober November Dezember".split()
TIMES = ("8 am", "9 am", "10 am", "noon", "2 pm", "3 pm", "4 pm", "5 pm", "the evening", "the morning")
TIMES_DE = ("8 Uhr", "9 Uhr", "10 Uhr", "Mittag", "14 Uhr", "15 Uhr", "16 Uhr", "17 Uhr", "abends", "morgens")
HOBBIES_EN = """
climbing running cycling chess painting piano guitar photography hiking swimming yoga knitting
gardening baking tennis rowing sailing skiing birdwatching pottery
""".split()
HOBBIES_DE = """
Klettern Laufen Radfahren Schach Malen Klavier Gitarre Fotografie Wandern Schwimmen Yoga Stricken
Gärtnern Backen Tennis Rudern Segeln Skifahren Vogelbeobachtung Töpfern
""".split()
STYLES_EN = ("short answers", "bullet points", "a formal tone", "plain language", "detailed explanations",
             "code examples first", "no emojis", "answers in German", "metric units", "summaries at the end")
STYLES_DE = ("kurze Antworten", "Stichpunkte", "einen förmlichen Ton", "einfache Sprache",
             "ausführliche Erklärungen",
             "zuerst Codebeispiele", "keine Emojis", "Antworten auf Englisch", "metrische Einheiten",
             "eine Zusammenfassung am Ende")
NEEDS_EN = ("large fonts", "screen reader friendly text", "captions on videos", "high contrast",
            "no flashing images",
            "step by step instructions", "extra time for replies")
NEEDS_DE = ("große Schrift", "Text für Screenreader", "Untertitel bei Videos", "hohen Kontrast",
            "keine blinkenden Bilder", "Anleitungen Schritt für Schritt", "mehr Zeit für Antworten")
_SYLLABLES = "ka lo ri ven tor mi sa dun bel gra fen quo zar pel nor vik tal shi ore lun bra mek sol tev"
_SYLLABLES = _SYLLABLES.split()


def _codenames() -> list[str]:
    words = ["".join(parts).capitalize()
             for size in (2, 3) for parts in itertools.product(_SYLLABLES, repeat=size)]
    random.Random(7).shuffle(words)
    return words[:3000]


class Zipf:
    """Draw items with probability proportional to rank^-s, ranks fixed by a seeded shuffle of `items`."""

    def __init__(self, items: Sequence[str], seed: int, s: float = 1.1) -> None:
        self.items = list(items)
        random.Random(seed).shuffle(self.items)
        weights = (1.0 / (rank ** s) for rank in range(1, len(self.items) + 1))
        self.cumulative = list(itertools.accumulate(weights))

    def __call__(self, rng: random.Random) -> str:
        return self.items[bisect.bisect(self.cumulative, rng.random() * self.cumulative[-1])]


@dataclass(frozen=True)
class Card:
    kind: str
    item_key: str
    value: str
    title: str
    content: str
    tags: tuple[str, ...]
    entities: tuple[str, ...]

    @property
    def embedding_text(self) -> str:
        """The text memory.services.embeddings embeds for this card (title, content, string value)."""
        return "\n".join(part for part in (self.title, self.content, self.value) if part)


class _Vocabulary:
    def __init__(self, lang: str) -> None:
        de = lang == "de"
        self.lang = lang
        self.first, self.last = Zipf(FIRST, 11), Zipf(LAST, 12)
        self.city, self.tool, self.codename = Zipf(CITIES, 13), Zipf(TOOLS, 14), Zipf(_codenames(), 15, s=1.0)
        self.food = Zipf(FOODS_DE if de else FOODS_EN, 16)
        self.topic = Zipf(TOPICS_DE if de else TOPICS_EN, 17)
        self.weekday = Zipf(WEEKDAYS_DE if de else WEEKDAYS_EN, 18)
        self.month = Zipf(MONTHS_DE if de else MONTHS_EN, 19)
        self.time = Zipf(TIMES_DE if de else TIMES, 20)
        self.hobby = Zipf(HOBBIES_DE if de else HOBBIES_EN, 21)
        self.style = Zipf(STYLES_DE if de else STYLES_EN, 22)
        self.need = Zipf(NEEDS_DE if de else NEEDS_EN, 23)

    def fill(self, template: str, rng: random.Random) -> dict[str, str]:
        slots = {
            "person": f"{self.first(rng)} {self.last(rng)}", "first": self.first(rng), "city": self.city(rng),
            "tool": self.tool(rng), "project": self.codename(rng), "food": self.food(rng),
            "topic": self.topic(rng), "weekday": self.weekday(rng), "month": self.month(rng),
            "time": self.time(rng), "hobby": self.hobby(rng),
            "style": self.style(rng), "need": self.need(rng), "ticket": str(rng.randint(100, 99_999)),
            "n": str(rng.randint(2, 40)), "year": str(rng.randint(2019, 2027)),
        }
        return {name: value for name, value in slots.items() if "{" + name + "}" in template}


# kind -> (weight, value slot, English templates, German templates); each template is "title | content".
TEMPLATES: dict[str, tuple[float, str, tuple[str, ...], tuple[str, ...]]] = {
    "project_context": (30, "project", (
        "{project} {topic} | The {project} {topic} runs on {tool}; {person} owns it and reviews changes on "
        "{weekday}.",
        "{project} in {city} | {project} is the {topic} project of the {city} office, planned for "
        "{month} {year}.",
        "{topic} for {project} | For {project}, the {topic} lives in {tool} and ticket #{ticket} tracks it.",
        "{project} contact | {person} is the contact for {project}; ask before touching the {topic}.",
    ), (
        "{project} {topic} | Die {topic} von {project} läuft auf {tool}; {person} ist zuständig, Prüfung am "
        "{weekday}.",
        "{project} in {city} | {project} ist das {topic}-Projekt des Büros in {city}, geplant für "
        "{month} {year}.",
        "{topic} für {project} | Für {project} liegt die {topic} in {tool}, Ticket #{ticket} verfolgt sie.",
        "Ansprechpartner {project} | {person} ist Ansprechpartner für {project}; vor der {topic} "
        "bitte fragen.",
    )),
    "decision": (20, "topic", (
        "Decision: {topic} | We decided to move the {topic} of {project} to {weekday} {time}.",
        "{tool} for {project} | The team decided to use {tool} for the {project} {topic} from {month} on.",
        "{topic} owner | Decided that {person} leads the {topic} until the end of {month}.",
    ), (
        "Entscheidung: {topic} | Wir haben die {topic} von {project} auf {weekday} {time} verschoben.",
        "{tool} für {project} | Das Team nutzt ab {month} {tool} für die {topic} von {project}.",
        "Verantwortung {topic} | Entschieden: {person} leitet die {topic} bis Ende {month}.",
    )),
    "hard_constraint": (2, "topic", (
        "No {topic} on {weekday} | Never schedule a {topic} on {weekday}; {person} is on call then.",
        "{project} freeze | No changes to {project} in {tool} during the {topic} in {month}.",
    ), (
        "Keine {topic} am {weekday} | Nie eine {topic} am {weekday} planen; {person} hat dann Bereitschaft.",
        "{project} eingefroren | Keine Änderungen an {project} in {tool} während der {topic} im {month}.",
    )),
    "skill": (10, "tool", (
        "{tool} skills | The user knows {tool} well and has used it for {n} years at {project}.",
        "{hobby} | The user has practised {hobby} every {weekday} since {year}.",
    ), (
        "{tool}-Kenntnisse | Der Nutzer kennt {tool} gut und arbeitet seit {n} Jahren bei {project} damit.",
        "{hobby} | Der Nutzer macht seit {year} jeden {weekday} {hobby}.",
    )),
    "preferred_ingredient": (8, "food", (
        "Likes {food} | The user likes {food}, ideally for lunch on {weekday}.",
        "{food} from {city} | The user prefers {food} from the market in {city}.",
    ), (
        "Mag {food} | Der Nutzer isst gern {food}, am liebsten mittags am {weekday}.",
        "{food} aus {city} | Der Nutzer bevorzugt {food} vom Markt in {city}.",
    )),
    "food_avoidance": (5, "food", (
        "No {food} | The user does not eat {food}; leave it out of every recipe.",
        "Allergic to {food} | {first} said the user is allergic to {food} since {year}.",
    ), (
        "Kein {food} | Der Nutzer isst kein {food}; bitte in keinem Rezept verwenden.",
        "Allergie gegen {food} | {first} sagt, der Nutzer ist seit {year} gegen {food} allergisch.",
    )),
    "dietary_restriction": (2, "food", (
        "Diet without {food} | The user follows a diet without {food} until {month}.",
    ), (
        "Ernährung ohne {food} | Der Nutzer ernährt sich bis {month} ohne {food}.",
    )),
    "communication_preference": (1.5, "style", (
        "Prefers {style} | The user wants {style} when asking about {topic}.",
    ), (
        "Bevorzugt {style} | Der Nutzer möchte {style}, wenn es um die {topic} geht.",
    )),
    "accessibility_need": (0.5, "need", (
        "Needs {need} | The user needs {need} in every answer.",
    ), (
        "Braucht {need} | Der Nutzer braucht {need} in jeder Antwort.",
    )),
}
KIND_NAMES = tuple(TEMPLATES)
_KIND_CUMULATIVE = list(itertools.accumulate(weight for weight, *_ in TEMPLATES.values()))
MESSAGE_TEMPLATES_EN = (
    "Can you remind me what we decided about the {topic} for {project}?",
    "{person} asked whether the {project} {topic} can move to {weekday}.",
    "I'm in {city} until {month}, so the {topic} has to be remote.",
    "Please use {tool} for the {topic}; {first} already set it up.",
    "Sure, I noted that the {topic} of {project} is due on {weekday} {time}.",
    "Ticket #{ticket} is about the {project} {topic}, {first} is looking at it.",
    "For lunch I'd like something with {food}, nothing too heavy.",
    "Thanks! Let's talk about {hobby} plans on {weekday}.",
)
MESSAGE_TEMPLATES_DE = (
    "Kannst du mich erinnern, was wir zur {topic} für {project} entschieden haben?",
    "{person} fragt, ob die {topic} von {project} auf {weekday} verschoben werden kann.",
    "Ich bin bis {month} in {city}, die {topic} muss also online stattfinden.",
    "Bitte nutze {tool} für die {topic}; {first} hat es schon eingerichtet.",
    "Klar, ich habe notiert: die {topic} von {project} ist am {weekday} um {time} fällig.",
    "Ticket #{ticket} betrifft die {topic} von {project}, {first} schaut es sich an.",
    "Zum Mittagessen hätte ich gern etwas mit {food}, nicht zu schwer.",
    "Danke! Lass uns am {weekday} über {hobby} reden.",
)
QUERY_TEMPLATES_EN = (
    "what did we decide about the {topic} for {project}", "who owns {project}", "does the user eat {food}",
    "when is the {topic} meeting", "which tool do we use for the {topic}",
    "what should I cook without {food}",
    "how does the user want answers about the {topic}", "{project} {topic} in {city}",
)
QUERY_TEMPLATES_DE = (
    "was haben wir zur {topic} von {project} entschieden", "wer ist für {project} zuständig",
    "isst der Nutzer {food}", "wann ist die {topic}", "welches Werkzeug nutzen wir für die {topic}",
    "was kann ich ohne {food} kochen", "{project} {topic} in {city}",
)
KEYWORD_TEMPLATES = ("{project}", "{project} {topic}", "#{ticket}", "{person}", "{tool} {project}")


class Corpus:
    """Texts of one seed: `card(i)`, `message(i)` and queries are pure functions of (seed, i)."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.vocabulary = {"en": _Vocabulary("en"), "de": _Vocabulary("de")}

    def _rng(self, stream: str, index: int) -> random.Random:
        return random.Random(f"{self.seed}:{stream}:{index}")

    def _sentence(self, template: str, rng: random.Random, lang: str) -> tuple[str, dict[str, str]]:
        slots = self.vocabulary[lang].fill(template, rng)
        return template.format(**slots), slots

    def card(self, index: int) -> Card:
        """Return the card text of `index`: half English, half German, kinds weighted as in TEMPLATES."""
        rng = self._rng("card", index)
        lang = "de" if rng.random() < 0.5 else "en"
        kind = KIND_NAMES[bisect.bisect(_KIND_CUMULATIVE, rng.random() * _KIND_CUMULATIVE[-1])]
        _, value_slot, english, german = TEMPLATES[kind]
        text, slots = self._sentence(rng.choice(german if lang == "de" else english), rng, lang)
        title, content = (part.strip() for part in text.split("|", 1))
        if rng.random() < 0.3:  # a second sentence now and then, as notes grow
            templates = MESSAGE_TEMPLATES_DE if lang == "de" else MESSAGE_TEMPLATES_EN
            extra, _ = self._sentence(rng.choice(templates), rng, lang)
            content = f"{content} {extra}"
        value = slots.get(value_slot) or slots.get("topic") or title
        tags = tuple(dict.fromkeys(slots[name] for name in ("topic", "tool", "hobby") if name in slots))[:2]
        entities = tuple(slots[name] for name in ("project", "person", "city") if name in slots)[:2]
        # A short stable concept, unique per card (memory.rules.item_keys refuses random tokens).
        item_key = f"{value} {index}"[:60]
        return Card(kind=kind, item_key=item_key, value=value, title=title, content=content, tags=tags,
                    entities=entities)

    def message(self, index: int) -> str:
        rng = self._rng("message", index)
        lang = "de" if rng.random() < 0.5 else "en"
        text, _ = self._sentence(rng.choice(MESSAGE_TEMPLATES_DE if lang == "de" else MESSAGE_TEMPLATES_EN),
                                 rng, lang)
        return text

    def hybrid_query(self, index: int) -> str:
        rng = self._rng("hybrid", index)
        lang = "de" if rng.random() < 0.5 else "en"
        templates = QUERY_TEMPLATES_DE if lang == "de" else QUERY_TEMPLATES_EN
        text, _ = self._sentence(rng.choice(templates), rng, lang)
        return text

    def keyword_query(self, index: int) -> str:
        rng = self._rng("keyword", index)
        text, _ = self._sentence(rng.choice(KEYWORD_TEMPLATES), rng, "de" if rng.random() < 0.5 else "en")
        return text
