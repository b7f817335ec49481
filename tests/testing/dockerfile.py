"""What the project's Dockerfile says, read from its text for the tests that hold the image built here
(``ballast/testing/agent_image.py``) equal to it: the final stage's ENV, USER, EXPOSE, ENTRYPOINT, CMD and
COPYs, the user its RUN creates, the virtualenv the build stage makes, and how bytecode is compiled.

Only the forms the Dockerfile uses are understood (``ENV k=v \\`` lists, exec-form ENTRYPOINT and CMD); a
form it does not know fails loudly, so a rewritten Dockerfile cannot slip past the comparison.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [args for kw, args in self.instructions if kw == keyword]

    def one(self, keyword: str) -> str:
        found = self.all(keyword)
        if len(found) != 1:
            raise ValueError(f"expected one {keyword} in the stage FROM {self.base}, found {len(found)}")
        return found[0]


def instructions(text: str) -> list[tuple[str, str]]:
    """(KEYWORD, arguments) per instruction: comments dropped, backslash continuations joined."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue  # a comment inside a continued instruction
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = pending + line
        pending = ""
        keyword, _, args = line.partition(" ")
        out.append((keyword.upper(), args.strip()))
    if pending:
        raise ValueError("the Dockerfile ends inside a continued line")
    return out


def stages(text: str) -> list[Stage]:
    result: list[Stage] = []
    for keyword, args in instructions(text):
        if keyword == "FROM":
            words = args.split()
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            result.append(Stage(words[0], name))
        elif result:
            result[-1].instructions.append((keyword, args))
    return result


def env_pairs(args: str) -> list[tuple[str, str]]:
    pairs = []
    for word in shlex.split(args):
        if "=" not in word:
            raise ValueError(f"ENV in the legacy `ENV key value` form is not understood: {args}")
        key, value = word.split("=", 1)
        pairs.append((key, value))
    return pairs


def exec_form(args: str, keyword: str) -> list[str]:
    value = json.loads(args)
    if not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
        raise ValueError(f"{keyword} is not in exec form: {args}")
    return value


def option(command: list[str], flag: str) -> str:
    """The value after ``flag`` in a shell command's words."""
    i = command.index(flag)
    return command[i + 1]


@dataclass(frozen=True)
class DockerfileLayout:
    env: dict[str, str]
    user: str
    exposed: list[str]
    entrypoint: list[str]
    cmd: list[str]
    copies: dict[str, str]  # source -> destination (the final stage's COPYs without --from)
    venv: str
    venv_command: list[str]
    compile_mode: str
    stdlib_exclude: str
    user_name: str
    uid: int
    gid: int
    home: str
    shell: str
    removed_packages: list[str]


def _commands(run: str) -> list[list[str]]:
    return [shlex.split(part) for part in re.split(r"\s&&\s", run)]


def read(path: Path) -> DockerfileLayout:
    all_stages = stages(path.read_text())
    final = all_stages[-1]
    build = next(s for s in all_stages if s.name == "build")
    env: dict[str, str] = {}
    for args in final.all("ENV"):
        env.update(env_pairs(args))
    copies: dict[str, str] = {}
    venv = ""
    for args in final.all("COPY"):
        words = args.split()
        if words[0].startswith("--from="):
            if words[1] != words[2]:
                raise ValueError(f"COPY --from copies {words[1]} to another path, {words[2]}")
            venv = words[1]
        else:
            copies[words[0]] = words[1]
    build_commands = [c for run in build.all("RUN") for c in _commands(run)]
    venv_command = next(c for c in build_commands if c[:3] == ["python", "-m", "venv"])
    final_commands = [c for run in final.all("RUN") for c in _commands(run)]
    compile_modes = {
        option(c, "--invalidation-mode") for c in build_commands + final_commands if "compileall" in c
    }
    if len(compile_modes) != 1:
        raise ValueError(f"compileall runs with several invalidation modes: {compile_modes}")
    stdlib_compile = next(c for c in final_commands if "compileall" in c)
    groupadd = next(c for c in final_commands if c[0] == "groupadd")
    useradd = next(c for c in final_commands if c[0] == "useradd")
    uninstall = next(c for c in final_commands if c[3:5] == ["uninstall", "-y"])
    return DockerfileLayout(
        env=env,
        user=final.one("USER"),
        exposed=final.one("EXPOSE").split(),
        entrypoint=exec_form(final.one("ENTRYPOINT"), "ENTRYPOINT"),
        cmd=exec_form(final.one("CMD"), "CMD"),
        copies=copies,
        venv=venv,
        venv_command=venv_command,
        compile_mode=compile_modes.pop(),
        stdlib_exclude=option(stdlib_compile, "-x"),
        user_name=useradd[-1],
        uid=int(option(useradd, "--uid")),
        gid=int(option(groupadd, "--gid")),
        home=option(useradd, "--home-dir"),
        shell=option(useradd, "--shell"),
        removed_packages=[w for w in uninstall[5:] if not w.startswith("-")],
    )
