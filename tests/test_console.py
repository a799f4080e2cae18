"""The console adapter, run as a person would: `python -m bot console` in a subprocess."""

import asyncio
import os
import sys

import pytest

from tests.conftest import API_KEY_ENV, ROOT
from tests.fakes.llm_server import cut_at_length, text, tool_calls


async def run_console(tmp_path, llm, lines: list[str], card=ROOT / "characters" / "mira.json",
                      name: str = "Ann", extra: str = "") -> tuple[int, str, str]:
    config = tmp_path / "config.toml"
    config.write_text(f"""
[llm]
base_url = "{llm.base_url}"
api_key_env = "{API_KEY_ENV}"
model = "gpt-4o-mini"
max_retries = 0

[storage]
path = "data/keepsake.sqlite3"

{extra}
[[characters]]
name = "Mira"
card = "{card}"
""")
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "console", "--character", "Mira", "--name", name,
        "--config", str(config), cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate("\n".join(lines).encode() + b"\n"), 60)
    return process.returncode, out.decode(), err.decode()


async def test_console_chats_and_answers_memory_commands(tmp_path, llm):
    llm.add(tool_calls(("save_memory", {"content": "Ann is allergic to peanuts"})),
            text("Then no peanut cookies for you, Ann."),
            text("Peanuts, as I recall."))
    code, out, err = await run_console(tmp_path, llm, [
        "I'm allergic to peanuts",
        "/memory view",
        "what am I allergic to?",
        "/memory add pin:yes my birthday is 3 May",
        "/memory pin banana",
        "/memory frobnicate",
        "",
        "/quit",
    ])
    assert code == 0, err
    assert "Oh — hello, Ann. Mind the wet stairs." in out  # the card's first_mes
    chat = [m for m in llm.requests[0]["messages"] if m["role"] != "system"]
    assert chat[-2:] == [  # and the conversation's first message
        {"role": "assistant", "content": "*Mira looks up from the logbook.* Oh — hello, Ann. Mind the wet stairs. Tea?"},
        {"role": "user", "content": "I'm allergic to peanuts"}]
    assert "Mira: Then no peanut cookies for you, Ann." in out
    assert "#1 · character · recent — Ann is allergic to peanuts" in out
    assert "Mira: Peanuts, as I recall." in out
    assert "Saved #2 (pinned) for Mira: my birthday is 3 May" in out
    assert "“banana” is not a memory number" in out
    assert "There is no /memory frobnicate" in out
    assert "your message had none" not in out  # an empty Enter is ignored
    assert '"Ann is allergic to peanuts"' in str(llm.requests[-1]["messages"])
    assert "Traceback" not in err


async def test_a_reply_cut_at_its_length_limit_says_on_screen_where_what_is_kept_ends(tmp_path, llm):
    """The console cannot take back the words it streamed: what is kept (up to the last whole
    sentence, as on every platform) is named, so the screen never says more than is stored."""
    llm.add(cut_at_length("The goats are fine. Rosa ate the roses again. And Pip, well, Pip was"),
            text("Rosa ate the roses."))
    code, out, err = await run_console(tmp_path, llm, ["how are the goats?", "and Pip?", "/quit"])
    assert code == 0, err
    assert "Mira: The goats are fine. Rosa ate the roses again. And Pip, well, Pip was" in out  # streamed
    assert "(Keepsake) The reply reached its length limit; it is kept up to “…fine. Rosa ate the roses again.”\n" in out
    assert {"role": "assistant", "content": "The goats are fine. Rosa ate the roses again."} in llm.requests[1][
        "messages"]  # what the next turn sees is what was kept
    assert out.count("length limit") == 1  # a whole reply says nothing more


async def test_the_end_of_a_reply_held_back_while_it_streamed_is_printed_once_it_is_kept(tmp_path, llm):
    """A last line that might have become one in the person's name ("An…" for "Ann:") is not
    streamed; once the reply is whole and kept, it is printed after the rest."""
    llm.add(text("Come in, the kettle is on.\nAn"))
    code, out, err = await run_console(tmp_path, llm, ["hello", "/quit"])
    assert code == 0, err
    assert "Mira: Come in, the kettle is on.\nAn\n" in out


async def test_console_regenerate_and_buttons(tmp_path, llm):
    llm.add(text("First try."), text("Second try."))
    code, out, err = await run_console(tmp_path, llm, [
        "hello", "/regenerate", "/memory add remember the lamp", "/memory clear", "/press 1",
        "/memory view", "/memory summary", "/memory save 2", "/press 2",
    ])
    assert code == 0, err
    assert "Mira: First try." in out and "Mira: Second try." in out
    assert "Delete your 1 unpinned character memory?" in out
    assert "[1] Delete 1" in out
    assert "Deleted 1 character memory." in out
    assert "You have no saved memories with Mira yet." in out
    assert "Summary of this conversation with Mira:" in out and "Not yet summarized: 3 messages." in out  # the greeting, hello, the reply
    assert "Chosen messages (2 of at most 20)" in out
    assert "Saved #2 (pinned): Ann: hello\nMira: Second try." in out


async def test_piped_input_ends_cleanly_when_quit_waits_behind_a_reply(tmp_path, llm):
    # `(echo hello; echo /quit) | python -m bot console …`: /quit is already waiting when the reply
    # finishes, so the summary task the reply scheduled is cancelled before it ever ran.
    for _ in range(3):
        llm.add(text("Hello to you."))
        code, out, err = await run_console(tmp_path, llm, ["hello", "/quit"])
        assert code == 0, err
        assert "Mira: Hello to you." in out
        assert "Traceback" not in err


async def test_quitting_right_after_start_prints_no_traceback(tmp_path, llm):
    code, out, err = await run_console(tmp_path, llm, ["/quit"])
    assert code == 0 and "Traceback" not in err and err.strip() == ""


async def test_at_a_terminal_arrow_keys_edit_the_line_and_the_terminal_is_given_back_as_it_was(tmp_path, llm):
    import pty
    import termios

    config = tmp_path / "config.toml"
    config.write_text(f'[llm]\nbase_url = "{llm.base_url}"\napi_key_env = "{API_KEY_ENV}"\nmax_retries = 0\n\n'
                      '[storage]\npath = "k.sqlite3"\n\n[[characters]]\nname = "Mira"\npersona = "You are Mira."\n')
    leader, follower = pty.openpty()
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "console", "--character", "Mira", "--name", "Ann", "--config", str(config),
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT), "TERM": "xterm"},
        stdin=follower, stdout=follower, stderr=follower)
    before = termios.tcgetattr(follower)
    terminal = os.dup(follower)  # to read its settings once the console has left
    os.close(follower)
    loop = asyncio.get_running_loop()

    async def read_until(marker: bytes, timeout: float = 20) -> bytes:
        seen = b""
        deadline = loop.time() + timeout
        while marker not in seen and loop.time() < deadline:
            try:
                seen += await asyncio.wait_for(loop.run_in_executor(None, os.read, leader, 4096), 5)
            except (asyncio.TimeoutError, OSError):
                break
        return seen

    try:
        await read_until(b"/quit to leave")
        os.write(leader, b"helo\x1b[Dl\r")  # "helo", left arrow, "l": "hello"
        await read_until(b"Okay.")
        os.write(leader, b"/quit\r")
        await asyncio.wait_for(process.wait(), 20)
        after = termios.tcgetattr(terminal)
    finally:
        if process.returncode is None:
            process.kill()
        os.close(leader)
        os.close(terminal)
    assert llm.requests[-1]["messages"][-1] == {"role": "user", "content": "hello"}
    assert after[3] & termios.ECHO and after[3] & termios.ICANON  # typing shows again in the shell
    assert after == before


async def test_the_programs_words_are_marked_as_the_programs_not_the_characters(tmp_path, llm):
    from tests.fakes.llm_server import status

    llm.add(status(500))
    code, out, err = await run_console(tmp_path, llm, ["/regenerate", "are you there?", "/nonsense"])
    assert "(Keepsake) There is no reply to regenerate yet." in out
    assert "(Keepsake) Sorry, I couldn't answer just now" in out
    assert "(Keepsake) Unknown command /nonsense." in out
    assert "Mira: Sorry" not in out and "Mira: There is no" not in out


async def test_code_markers_are_not_printed_and_actions_keep_their_asterisks_off_a_terminal(tmp_path, llm):
    """Piped (no terminal to show italics), an *action* keeps its asterisks (#47); at a terminal
    it is shown in italics (tests/test_console.py::test_at_a_terminal_actions_are_in_italics)."""
    llm.add(text("*Mira smiles.* **Welcome**, Ann — have some `tea`."))
    code, out, err = await run_console(tmp_path, llm, ["hello"])
    assert "Mira: *Mira smiles.* **Welcome**, Ann — have some tea." in out and "`" not in out


def test_at_a_terminal_actions_are_in_italics():
    from adapters.console import ITALIC, UPRIGHT, plain

    assert plain("*nods* Noted.", italics=True) == f"{ITALIC}nods{UPRIGHT} Noted."
    growing = "*nods slowly* Noted"
    shown = [plain(growing[:n], italics=True) for n in range(len(growing) + 1)]
    assert all(later.startswith(earlier) for earlier, later in zip(shown, shown[1:]))  # a stream only grows


async def test_choices_are_printed_a_row_a_line_and_saving_is_explained_the_console_way(tmp_path, llm):
    lines = [f"/memory add fact {i}" for i in range(10)] + ["/memory view", "/memory save"]
    code, out, err = await run_console(tmp_path, llm, lines)
    view = out[out.index("Your memories with Mira"):]
    assert "[1] Pin #10  [2] Pin #9  [3] Pin #8  [4] Pin #7  [5] Pin #6\n" in view
    assert "\n[11] Delete #10  [12] Delete #9" in view
    assert "send /memory save N to pick the last N messages" in out
    assert "Discord" not in out and "Telegram" not in out


async def test_log_lines_go_to_a_file_unless_verbose(tmp_path, llm):
    from tests.fakes.llm_server import status

    llm.add(status(500))
    code, out, err = await run_console(tmp_path, llm, ["are you there?"])
    log = tmp_path / "keepsake-console.log"
    assert f"(Keepsake) Log lines go to {log}" in out
    assert "WARNING" not in out + err
    assert "a turn in conversation 1 failed" in log.read_text()


async def test_without_user_the_console_name_is_the_login_account(tmp_path, llm):
    """#62: a container sets no $USER; the console then names its person by the account running
    it, never a shared "Guest" (who would land in the owner's list of who spent most)."""
    import pwd

    config = tmp_path / "config.toml"
    config.write_text(f'[llm]\nbase_url = "{llm.base_url}"\napi_key_env = "{API_KEY_ENV}"\nmax_retries = 0\n\n'
                      '[storage]\npath = "k.sqlite3"\n\n[[characters]]\nname = "Mira"\n'
                      'persona = "You are Mira; you greet {{user}} by name."\n')
    unset = ("USER", "LOGNAME", "LNAME", "USERNAME")
    env = {k: v for k, v in os.environ.items() if k not in unset} | {"PYTHONPATH": str(ROOT)}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "console", "--character", "Mira", "--config", str(config), cwd=tmp_path,
        env=env, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    await asyncio.wait_for(process.communicate(b"hello\n"), 60)
    account = pwd.getpwuid(os.getuid()).pw_name
    assert f"you greet {account} by name" in llm.prompt_text() and account != "Guest"
    assert " you " not in llm.requests[-1]["messages"][-1]["content"]


async def test_a_new_conversation_starts_with_first_mes_and_start_shows_the_other_greetings(tmp_path, llm):
    import json

    card = json.loads((ROOT / "characters" / "mira.json").read_text())
    card["data"]["alternate_greetings"] = ["The fog is thick tonight, {{user}}. Come in."]
    (tmp_path / "mira.json").write_text(json.dumps(card))
    llm.add(text("Sit by the fire."))
    code, out, err = await run_console(tmp_path, llm, ["/start 2", "hello", "/start 7", "/quit"],
                                       card=tmp_path / "mira.json")
    assert code == 0, err
    assert "Mira: The fog is thick tonight, Ann. Come in." in out
    assert "(Keepsake) Mira has other greetings too: /start 1." in out
    assert "(Keepsake) Mira has greetings 1 to 2: /start 1 … /start 2." in out  # /start 7: the bot says so, not Mira
    assert "Mira: Mira has greetings" not in out
    greeting = json.loads((ROOT / "characters" / "mira.json").read_text())["data"]["first_mes"].replace("{{user}}", "Ann")
    chat = [m for m in llm.requests[0]["messages"] if m["role"] != "system"]
    assert chat[-2] == {"role": "assistant", "content": greeting}  # first_mes was kept



async def test_each_console_name_is_a_person_with_a_conversation_of_its_own(tmp_path, llm):
    """SPEC 2: Sam's prompt never holds Guest's chat, and /memory save as Quinn saves Quinn's words."""
    await run_console(tmp_path, llm, ["my locker code is 4471", "/quit"], name="Guest")
    await run_console(tmp_path, llm, ["hello, who am I?", "/quit"], name="Sam")
    assert "4471" not in llm.prompt_text()
    code, out, _ = await run_console(tmp_path, llm, ["/memory save 2", "/press 2", "/memory view", "/quit"],
                                     name="Quinn")
    assert code == 0 and "4471" not in out and "who am I" not in out


async def test_the_readmes_first_command_ends_in_a_reply_with_a_model_on_this_machine(tmp_path, llm):
    """The README's "Run Keepsake" line with config.local.toml as it is in the checkout, pointed
    at the scripted server with --base-url (so the test holds whatever server a person set
    there), and no API key variable at all: a reply in the console."""
    import re

    readme = (ROOT / "README.md").read_text()
    command = re.search(r"python -m bot console (.*?)\n", readme).group(1).split()
    assert command[:4] == ["--character", "Mira", "--config", "config.local.toml"]
    local = (ROOT / "config.local.toml").read_text()
    port = llm.base_url.split(":")[-1].split("/")[0]
    (tmp_path / "config.local.toml").write_text(local.replace('"characters/', f'"{ROOT}/characters/'))
    llm.model = "llama3.1:latest"  # as Ollama lists it; it serves "llama3.1" as that one (#47)
    llm.add(text("Hello from a model on this machine."))
    env = {k: v for k, v in os.environ.items() if k != API_KEY_ENV} | {"PYTHONPATH": str(ROOT)}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "console", *command, "--name", "Sam", "--base-url", f"http://127.0.0.1:{port}/v1",
        cwd=tmp_path, env=env,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(process.communicate(b"hello\n/quit\n"), 60)
    assert process.returncode == 0, err.decode()
    assert "Mira: Hello from a model on this machine." in out.decode()
    assert llm.requests[-1]["model"] == "llama3.1"
    assert "has no model" not in out.decode() + err.decode()  # no false alarm for an Ollama name without a tag


async def test_a_model_the_server_does_not_have_is_named_in_the_console_with_what_it_has(tmp_path, llm):
    """#36: the start-up line "has no model … (it lists: …)" reaches the person, not only the log file."""
    local = (ROOT / "config.local.toml").read_text()
    (tmp_path / "config.local.toml").write_text(local.replace('"characters/', f'"{ROOT}/characters/'))
    env = {k: v for k, v in os.environ.items() if k != API_KEY_ENV} | {"PYTHONPATH": str(ROOT)}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "console", "--character", "Mira", "--config", "config.local.toml",
        "--model", "qwen2.5", "--base-url", llm.base_url, "--name", "Sam", cwd=tmp_path, env=env,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(process.communicate(b"/quit\n"), 60)
    assert process.returncode == 0, err.decode()
    assert f"(Keepsake) The model server at {llm.base_url} has no model 'qwen2.5' (it lists: {llm.model}); " \
           "check [llm] model, or pull it (Ollama: ollama pull qwen2.5)." in out.decode()


async def test_a_restarted_console_shows_where_the_talk_left_off_and_keeps_actions_apart_from_speech(tmp_path, llm):
    """#47: a card's *actions* keep their asterisks where the terminal shows no italics (never
    "Mira: nods Noted"); a restart greets no one again, it shows where the talk left off; a
    reply that fails leaves no empty "Mira: " line before the error."""
    from tests.fakes.llm_server import status

    llm.add(text("*nods slowly* Noted, Ann."))
    code, out, err = await run_console(tmp_path, llm, ["the tide is at six", "/quit"])
    assert code == 0, err
    assert "Mira: *Mira looks up from the logbook.* Oh — hello, Ann." in out  # a new conversation: greeted
    assert "Mira: *nods slowly* Noted, Ann." in out

    llm.add(status(500, "the server fell over"))
    code, out, err = await run_console(tmp_path, llm, ["still there?", "/quit"])
    assert code == 0, err
    assert "Mira looks up from the logbook" not in out  # not greeted again mid-conversation
    assert "(Keepsake) Where you left off:\nAnn: the tide is at six\nMira: *nods slowly* Noted, Ann.\n" in out
    assert "Mira: \n" not in out and "(Keepsake) Sorry, I couldn't answer just now" in out


async def test_the_console_names_a_voice_note_it_cannot_play_and_never_makes_it(tmp_path, llm):
    """#49: a reply's parts go through each adapter's one way of sending them; the console names
    what it cannot show (and asks no speech of the server)."""
    voice = '[voice]\nspeech_model = "tts-1"\nreply_in_voice = "always"\n'
    llm.add(text("The lamp is lit."))
    code, out, err = await run_console(tmp_path, llm, ["is the lamp lit?", "/quit"], extra=voice)
    assert code == 0, err
    assert "Mira: The lamp is lit.\n" in out
    assert "(Keepsake) (A voice note comes with this reply on Discord and Telegram; the console shows text only)" in out
    assert llm.speech_requests == []


@pytest.mark.parametrize("before", [True, False])
def test_config_given_before_or_after_the_console_command_is_the_one_read(tmp_path, capsys, before):
    """#62: `python -m bot --config X console …` read config.toml instead of X."""
    from bot.cli import main

    wanted = str(tmp_path / "elsewhere.toml")
    console = ["console", "--character", "Mira"]
    assert main(["--config", wanted, *console] if before else [*console, "--config", wanted]) == 2
    assert f"{wanted}: file not found" in capsys.readouterr().err


async def test_reminders_and_checkins_in_the_console_say_where_they_work(tmp_path, llm):
    """#62: `/reminders` and `/checkins on` answered "Unknown command" in the console."""
    code, out, err = await run_console(tmp_path, llm, ["/reminders", "/checkins on", "/quit"])
    assert code == 0, err
    assert out.count("is for Discord and Telegram, where reminders and check-ins are delivered") == 2
    assert "Unknown command" not in out
