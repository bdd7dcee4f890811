"""The texts the designer and the hint writer are given: our own wording of METHOD.md 1.2, 1.3, 2 and 5.

Each text is a file of this folder, read as it is (its last newline dropped), so that a prompt can be
read and edited without touching any logic; the reference game of the no-corpus game prompt is an
environment like the seed ones, and lives with them (envs/reference/). In the texts that designer.py fills in with `str.format`,
`{name}` marks a blank and `{{`, `}}` stand for one brace. designer.py assembles them into chat
messages (which text goes where, with which document, skill and memory block). Nothing parses these
texts except the model.

The wording is new (the official prompt text is not copied); what each text must carry is what
METHOD.md lists: the interactive `\\boxed{}` contract of games (1.2 A and B), the `ToolUseBaseEnv`
multi-instruction contract of tool use (1.3), the skill/difficulty footer (2.2), the ten tool-use
domains and four task variants (2.2), the two hint-writer instructions (5), and the solvability
audit of tool-use environments (3.1 step 4).
"""
import json
import pathlib

HERE = pathlib.Path(__file__).parent


def text(name: str) -> str:
    return (HERE / name).read_text().removesuffix("\n")


# Games (METHOD 1.2, 2.1): one system message for the corpus and no-corpus prompts.
GAME_DESIGNER_SYSTEM = text("game_designer_system.md")
# (A) with a corpus document, which goes between the header and the contract.
CORPUS_GAME_HEADER = text("corpus_game_header.md")
CORPUS_GAME_CONTRACT = text("corpus_game_contract.md")
GAME_FOOTER = text("game_footer.md")   # easy asks for fewer interactions than medium/hard (METHOD 2.2)
# (B) without a corpus: the multi-turn contract plus one complete game of our own, an environment (envs/).
NO_CORPUS_GAME_CONTRACT = text("no_corpus_game_contract.md")
REFERENCE_GAME = text("../envs/reference/greenhouse_optimization.py")

# Tool use (METHOD 1.3, 2.1, 2.2): one user message, no system message.
TOOL_TASK = text("tool_task.md")
TOOL_SNIPPET_NOTE = text("tool_snippet_note.md")
TOOL_SKILL = text("tool_skill.md")
TOOL_CONTRACT = text("tool_contract.md")

# The memory block (METHOD 2.2, 8), the hints (METHOD 5, mode "self") and the solvability audit of
# tool-use environments (METHOD 3.1 step 4, one user message).
MEMORY_INTRO = text("memory_intro.md")
MEMORY_AVOID = text("memory_avoid.md")
HINT_GAME_SYSTEM = text("hint_game_system.md")
HINT_TOOL_SYSTEM = text("hint_tool_system.md")
HINT_USER = text("hint_user.md")
AUDIT_TOOL_USER = text("audit_tool_user.md")

# The tables (METHOD 2.2): the ten tool-use domains; the variant multiset {execute x3, read_then_write
# x2, miss_param x1, irrelevant x1} and each variant's text; per skill, four game ideas (3 of them
# shown in the no-corpus prompt, none in the corpus prompt) and four tool-use tasks (all shown).
TABLES = json.loads(text("tables.json"))
TOOL_DOMAINS = TABLES["tool_domains"]
TOOL_VARIANTS = TABLES["tool_variants"]
TOOL_VARIANT_TEXT = TABLES["tool_variant_text"]
GAME_SKILL_IDEAS = TABLES["game_skill_ideas"]
TOOL_SKILL_TASKS = TABLES["tool_skill_tasks"]
