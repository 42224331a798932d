"""What our Dockerfiles do with the build context, read with dockerfile-parse.

A deliberately small model of Docker's semantics, enough for docker/Dockerfile.*: one stage,
WORKDIR, COPY from the context (a folder copies its contents; `dest/` takes file names), and
the paths `pip install` reads in RUN steps. Anything it does not model (ADD, COPY --from,
wildcards, variables in paths, several stages) raises UnsupportedInstruction, so a test fails
loudly instead of passing on a Dockerfile it cannot read: extend the model then.
"""

from __future__ import annotations

import dataclasses
import io
import pathlib
import posixpath
import re
import shlex

from dockerfile_parse import DockerfileParser

# pip options that take a value (the value is not a requirement or a path to install).
_PIP_VALUE_OPTIONS = frozenset(
    {
        "-i", "--index-url", "--extra-index-url", "-f", "--find-links", "-t", "--target",
        "--prefix", "--root", "--cache-dir", "--src", "--platform", "--python-version",
        "--implementation", "--abi", "--upgrade-strategy", "--progress-bar", "--log",
        "--proxy", "--timeout", "--retries", "--trusted-host", "--report", "-C",
        "--config-settings", "--no-binary", "--only-binary", "--global-option",
    }
)  # fmt: skip
_PIP_FILE_OPTIONS = frozenset({"-c", "--constraint", "-r", "--requirement"})
_PIP_EDITABLE_OPTIONS = frozenset({"-e", "--editable"})
_SHELL_OPERATORS = frozenset({"&&", "||", ";", "|", "(", ")", "&"})
_EXTRAS = re.compile(r"\[[^\]]*\]$")


class UnsupportedInstruction(AssertionError):
    """The Dockerfile uses something this model does not simulate."""


@dataclasses.dataclass(frozen=True)
class PipInstall:
    """The local inputs of one `pip install` in a RUN step, as absolute paths in the image."""

    line: int
    constraint_files: tuple[str, ...]
    local_projects: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Dockerfile:
    path: pathlib.Path
    instructions: tuple[dict[str, object], ...]
    labels: dict[str, str]
    args: dict[str, str]

    @classmethod
    def read(cls, path: pathlib.Path) -> Dockerfile:
        # fileobj, not a path: given a path, dockerfile-parse would write through `.content`.
        parser = DockerfileParser(fileobj=io.BytesIO(path.read_bytes()))
        return cls(path, tuple(parser.structure), dict(parser.labels), dict(parser.args))

    def values(self, instruction: str) -> list[str]:
        return [str(i["value"]) for i in self.instructions if i["instruction"] == instruction]

    def comments(self) -> list[str]:
        return self.values("COMMENT")

    def resolve_args(self, text: str) -> str:
        """`${NAME}` / `$NAME` replaced by the ARG defaults."""
        for name, value in self.args.items():
            text = text.replace(f"${{{name}}}", value).replace(f"${name}", value)
        return text

    def copy_sources(self) -> list[tuple[int, list[str]]]:
        """(line, sources) of every COPY, sources as written (relative to the context)."""
        return [(line, sources) for line, sources, _ in self._copies()]

    def image_files(self, context: frozenset[str]) -> dict[str, str]:
        """Absolute path in the image → context path, for every file the COPY steps add."""
        out: dict[str, str] = {}
        for _, sources, destination in self._copies():
            for source in sources:
                out.update(_copy_one(context, source, destination, multiple=len(sources) > 1))
        return out

    def pip_installs(self) -> list[PipInstall]:
        """Every `pip install` in a RUN step, with the working directory it runs in."""
        found: list[PipInstall] = []
        for line, workdir, instruction in self._walk():
            if instruction["instruction"] == "RUN":
                found += _pip_installs(line, workdir, str(instruction["value"]))
        return found

    def project_files(self, context: frozenset[str]) -> tuple[str, dict[str, str]]:
        """The folder the image's one local `pip install` builds, and its files (path relative
        to that folder → context path): exactly what pip sees in the image."""
        projects = {p for install in self.pip_installs() for p in install.local_projects}
        if len(projects) != 1:
            raise UnsupportedInstruction(f"{self.path}: expected one local project, got {projects}")
        (project,) = projects
        prefix = project.rstrip("/") + "/"
        files = self.image_files(context)
        return project, {t[len(prefix) :]: s for t, s in files.items() if t.startswith(prefix)}

    def _walk(self) -> list[tuple[int, str, dict[str, object]]]:
        """(line, WORKDIR in effect, instruction) for each instruction after FROM."""
        if len(self.values("FROM")) != 1:
            raise UnsupportedInstruction(f"{self.path}: only single-stage builds are modelled")
        workdir = "/"
        walked: list[tuple[int, str, dict[str, object]]] = []
        for instruction in self.instructions:
            kind, value = instruction["instruction"], str(instruction["value"])
            line = int(str(instruction["startline"])) + 1
            if kind == "ADD":
                raise UnsupportedInstruction(f"{self.path}:{line}: ADD (use COPY)")
            if kind == "WORKDIR":
                if "$" in value:
                    raise UnsupportedInstruction(f"{self.path}:{line}: variable in WORKDIR")
                workdir = posixpath.normpath(posixpath.join(workdir, value))
            walked.append((line, workdir, instruction))
        return walked

    def _copies(self) -> list[tuple[int, list[str], str]]:
        copies: list[tuple[int, list[str], str]] = []
        for line, workdir, instruction in self._walk():
            if instruction["instruction"] != "COPY":
                continue
            value = str(instruction["value"])
            if value.lstrip().startswith("["):
                raise UnsupportedInstruction(f"{self.path}:{line}: JSON-form COPY")
            words = shlex.split(value)
            flags = [w for w in words if w.startswith("--")]
            paths = [w for w in words if not w.startswith("--")]
            unsupported = [f for f in flags if not f.startswith(("--chown=", "--chmod="))]
            if unsupported or len(paths) < 2 or any(re.search(r"[*?\[$]", p) for p in paths):
                raise UnsupportedInstruction(f"{self.path}:{line}: COPY {value}")
            *sources, destination = paths
            if not posixpath.isabs(destination):
                trailing = "/" if destination.endswith("/") else ""
                destination = posixpath.join(workdir, destination).rstrip("/") + trailing
            copies.append((line, sources, destination))
        return copies


def source_in_context(context: frozenset[str], source: str) -> bool:
    """Whether a COPY source names a file or a non-empty folder of the build context."""
    clean = posixpath.normpath(source.lstrip("/"))
    return clean == "." or clean in context or any(p.startswith(f"{clean}/") for p in context)


def _copy_one(
    context: frozenset[str], source: str, destination: str, *, multiple: bool
) -> dict[str, str]:
    """Docker's COPY rules for one source (see the Dockerfile reference)."""
    clean = posixpath.normpath(source.lstrip("/"))
    if clean.startswith(".."):
        raise UnsupportedInstruction(f"COPY source outside the context: {source}")
    into_folder = destination.endswith("/") or multiple
    if clean in context:  # a file: dest/name, or dest itself
        target = posixpath.join(destination, posixpath.basename(clean)) if into_folder else None
        return {posixpath.normpath(target or destination): clean}
    prefix = "" if clean == "." else clean + "/"
    # A folder: its contents (not the folder itself) go into dest.
    return {
        posixpath.normpath(posixpath.join(destination, path[len(prefix) :])): path
        for path in context
        if path.startswith(prefix)
    }


def _pip_installs(line: int, workdir: str, command: str) -> list[PipInstall]:
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    words = list(lexer)
    found: list[PipInstall] = []
    for start, word in enumerate(words):
        is_pip = word == "pip" or word.endswith("/pip") or re.fullmatch(r"pip3(\.\d+)?", word)
        if not (is_pip and "install" in words[start + 1 : start + 3]):
            continue
        args = words[words.index("install", start) + 1 :]
        end = next((i for i, w in enumerate(args) if w in _SHELL_OPERATORS), len(args))
        found.append(_pip_install(line, workdir, args[:end]))
    return found


def _pip_install(line: int, workdir: str, args: list[str]) -> PipInstall:
    files: list[str] = []
    projects: list[str] = []

    def in_image(path: str) -> str:
        return posixpath.normpath(posixpath.join(workdir, path))

    words = iter(args)
    for word in words:
        option, _, inline = word.partition("=")
        if option in _PIP_FILE_OPTIONS:
            files.append(in_image(inline or next(words)))
        elif option in _PIP_EDITABLE_OPTIONS:
            projects.append(in_image(_EXTRAS.sub("", inline or next(words))))
        elif option in _PIP_VALUE_OPTIONS and not inline:
            next(words)
        elif word.startswith(("-c", "-r")) and len(word) > 2 and not word.startswith("--"):
            files.append(in_image(word[2:]))
        elif not word.startswith("-") and word.startswith((".", "/")):
            projects.append(in_image(_EXTRAS.sub("", word)))
    return PipInstall(line, tuple(files), tuple(projects))
