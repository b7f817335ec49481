"""Helpers for the deployment tests: manifests, RBAC as the API server evaluates it, scheduler configs,
the Dockerfile and ``.dockerignore``, and the dependency lock.

- **RBAC.** ``api_call`` turns one request from the fake API server's log into the attributes the real
  RBAC authorizer sees (verb, API group, resource, subresource, namespace, name), with the API server's
  verb mapping (``GET`` object -> get, collection -> list, ``?watch`` -> watch, ``POST`` -> create,
  ``PUT`` -> update, ``PATCH`` -> patch, ``DELETE`` -> delete / deletecollection). ``grants_for`` collects
  what a service account is granted by the manifests (Roles through RoleBindings in their namespace,
  ClusterRoles through ClusterRoleBindings everywhere); ``audit`` says which calls no grant allows and
  which granted permissions no call used.
- **Scheduler configuration.** ``validate_scheduler_config`` applies kube-scheduler's
  ``validateExtenders`` rules (``kubescheduler.config.k8s.io/v1``) plus the checks its decoder makes on
  the fields, and a few that catch configurations that load but cannot work.
- **Dockerfile.** ``parse_dockerfile`` reads stages and instructions; ``DockerIgnore`` matches paths the
  way the builder does (last matching pattern wins, ``!`` re-includes, a pattern that matches a parent
  directory matches everything under it).
- **Lock.** ``lock_lines`` lists the runtime dependency closure of the installed ``ballast`` with the
  installed versions, then the build tools: ``python -m tests.deploy_rbac lock > requirements.lock``.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ballast.contract.durations import parse_duration

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "scheduler_config" / "deploy"
PROMETHEUS = DEPLOY / "prometheus"
"""The optional kustomize Component with the annotator (clusters whose node load comes from Prometheus)."""

# --------------------------------------------------------------------------------------------- manifests


def load_documents(path: Path) -> list[dict[str, Any]]:
    """Every non-empty YAML document of a file, in order."""
    with path.open(encoding="utf-8") as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def manifests(directory: Path = DEPLOY, *, recursive: bool = True) -> dict[Path, list[dict[str, Any]]]:
    """Documents per YAML file under ``directory`` (the kustomization itself is not a manifest)."""
    pattern = "**/*.yaml" if recursive else "*.yaml"
    return {
        p: load_documents(p)
        for p in sorted(directory.glob(pattern))
        if p.name not in ("kustomization.yaml", "kustomization.yml")
    }


def objects(files: Mapping[Path, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    return [d for docs in files.values() for d in docs]


def find(docs: Iterable[Mapping[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [d for d in docs if d.get("kind") == kind and (d.get("metadata") or {}).get("name") == name]
    if len(found) != 1:
        raise LookupError(f"expected one {kind} {name}, found {len(found)}")
    return dict(found[0])


# ------------------------------------------------------------------------------------------------- RBAC

_TRUE = {"1", "t", "T", "TRUE", "true", "True"}


@dataclass(frozen=True, order=True)
class ApiCall:
    """The attributes the RBAC authorizer sees for one request."""

    verb: str
    group: str
    resource: str
    subresource: str = ""
    namespace: str = ""
    name: str = ""

    @property
    def resource_path(self) -> str:
        """``resource`` or ``resource/subresource``, as RBAC rules name them."""
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource

    def __str__(self) -> str:
        where = f" in {self.namespace}" if self.namespace else ""
        named = f" {self.name}" if self.name else ""
        group = self.group or "core"
        return f"{self.verb} {self.resource_path}.{group}{named}{where}"


def api_call(method: str, path: str, query: Mapping[str, str] | None = None) -> ApiCall:
    """Map a request to RBAC attributes (the API server's ``RequestInfoFactory``, for resource paths)."""
    query = query or {}
    parts = [p for p in path.split("?")[0].split("/") if p]
    if parts[:2] == ["api", "v1"]:
        group, rest = "", parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 3:
        group, rest = parts[1], parts[3:]
    else:
        raise ValueError(f"not a resource path: {path}")
    namespace = ""
    if len(rest) >= 3 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    elif len(rest) == 2 and rest[0] == "namespaces":  # the namespace object itself
        rest = ["namespaces", rest[1]]
    if not rest:
        raise ValueError(f"no resource in {path}")
    resource = rest[0]
    name = rest[1] if len(rest) > 1 else ""
    subresource = rest[2] if len(rest) > 2 else ""
    method = method.upper()
    if method in ("GET", "HEAD"):
        watch = query.get("watch") in _TRUE
        verb = "watch" if watch else ("get" if name else "list")
    elif method == "POST":
        verb = "create"
    elif method == "PUT":
        verb = "update"
    elif method == "PATCH":
        verb = "patch"
    elif method == "DELETE":
        verb = "delete" if name else "deletecollection"
    else:
        raise ValueError(f"no RBAC verb for {method}")
    if not name and verb in ("list", "watch"):
        # A list or watch narrowed to one object by metadata.name is authorized with that name.
        for term in (query.get("fieldSelector") or "").split(","):
            key, sep, value = term.partition("=")
            if sep and key.strip() == "metadata.name" and not value.startswith("="):
                name = value.strip()
    return ApiCall(verb, group, resource, subresource, namespace, name)


def calls_from(requests: Iterable[Any]) -> set[ApiCall]:
    """RBAC attributes of every request in a ``FakeKube.requests`` log."""
    return {api_call(r.method, r.path, r.query) for r in requests}


@dataclass(frozen=True)
class Grant:
    """One rule of a role, as bound to a subject: ``namespace`` empty means cluster-wide."""

    role_kind: str
    role_name: str
    namespace: str
    rule: tuple[tuple[str, tuple[str, ...]], ...]

    @property
    def api_groups(self) -> tuple[str, ...]:
        return dict(self.rule).get("apiGroups", ())

    @property
    def resources(self) -> tuple[str, ...]:
        return dict(self.rule).get("resources", ())

    @property
    def verbs(self) -> tuple[str, ...]:
        return dict(self.rule).get("verbs", ())

    @property
    def resource_names(self) -> tuple[str, ...]:
        return dict(self.rule).get("resourceNames", ())

    def allows(self, call: ApiCall) -> bool:
        """The RBAC authorizer's rule match (``rbac/v1`` ``RuleAllows``) plus the binding's scope."""
        if self.namespace and call.namespace != self.namespace:
            return False
        if not ("*" in self.api_groups or call.group in self.api_groups):
            return False
        if not ("*" in self.verbs or call.verb in self.verbs):
            return False
        if not _resource_matches(self.resources, call):
            return False
        return not self.resource_names or call.name in self.resource_names

    def permissions(self) -> list[Permission]:
        names = self.resource_names or ("",)
        return [
            Permission(self.role_kind, self.role_name, self.namespace, g, r, v, n)
            for g in self.api_groups
            for r in self.resources
            for v in self.verbs
            for n in names
        ]


def _resource_matches(resources: Sequence[str], call: ApiCall) -> bool:
    wanted = call.resource_path
    for r in resources:
        if r in ("*", wanted):
            return True
        if call.subresource and r == f"*/{call.subresource}":
            return True
    return False


@dataclass(frozen=True, order=True)
class Permission:
    """One (group, resource, verb, resourceName) a role grants: the unit that must be used by some call."""

    role_kind: str
    role_name: str
    namespace: str
    group: str
    resource: str
    verb: str
    resource_name: str = ""

    def used_by(self, call: ApiCall) -> bool:
        grant = Grant(
            self.role_kind,
            self.role_name,
            self.namespace,
            _freeze(
                {
                    "apiGroups": [self.group],
                    "resources": [self.resource],
                    "verbs": [self.verb],
                    **({"resourceNames": [self.resource_name]} if self.resource_name else {}),
                }
            ),
        )
        return grant.allows(call)

    def __str__(self) -> str:
        named = f" (name {self.resource_name})" if self.resource_name else ""
        where = f" in {self.namespace}" if self.namespace else ""
        return (
            f"{self.role_kind}/{self.role_name}: {self.verb} {self.resource}.{self.group or 'core'}"
            f"{named}{where}"
        )


def _freeze(rule: Mapping[str, Any]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    return tuple(sorted((k, tuple(v)) for k, v in rule.items() if isinstance(v, list)))


@dataclass
class Bindings:
    """What a service account is bound to: grants from manifest roles, and built-in roles by name."""

    grants: list[Grant] = field(default_factory=list)
    builtin: list[tuple[str, str, str]] = field(default_factory=list)
    """(role kind, role name, binding namespace or "") for roles not defined in the manifests."""


def _subject_matches(subject: Mapping[str, Any], namespace: str, name: str) -> bool:
    return (
        subject.get("kind") == "ServiceAccount"
        and subject.get("name") == name
        and subject.get("namespace") == namespace
    )


def grants_for(docs: Iterable[Mapping[str, Any]], namespace: str, name: str) -> Bindings:
    """The grants of service account ``namespace/name`` from the Role/ClusterRole objects in ``docs``."""
    docs = list(docs)
    roles = {
        (d["kind"], (d["metadata"].get("namespace") or ""), d["metadata"]["name"]): d
        for d in docs
        if d.get("kind") in ("Role", "ClusterRole")
    }
    out = Bindings()
    for b in docs:
        if b.get("kind") not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        if not any(_subject_matches(s, namespace, name) for s in b.get("subjects") or []):
            continue
        ref = b["roleRef"]
        bind_ns = (b["metadata"].get("namespace") or "") if b["kind"] == "RoleBinding" else ""
        role_ns = bind_ns if ref["kind"] == "Role" else ""
        role = roles.get((ref["kind"], role_ns, ref["name"]))
        if role is None:
            out.builtin.append((ref["kind"], ref["name"], bind_ns))
            continue
        for rule in role.get("rules") or []:
            out.grants.append(Grant(ref["kind"], ref["name"], bind_ns, _freeze(rule)))
    return out


@dataclass
class Audit:
    denied: list[ApiCall]
    """Calls no grant allows: the component would get 403 Forbidden."""
    unused: list[Permission]
    """Granted permissions no call used (and not exempted): more than the code needs."""


def audit(
    calls: Iterable[ApiCall],
    grants: Sequence[Grant],
    exempt: Mapping[Permission, str] | None = None,
) -> Audit:
    """Check ``calls`` against ``grants`` both ways; ``exempt`` maps permissions to why no call uses them."""
    calls = sorted(set(calls))
    exempt = exempt or {}
    denied = [c for c in calls if not any(g.allows(c) for g in grants)]
    unused = sorted(
        {
            p
            for g in grants
            for p in g.permissions()
            if p not in exempt and not any(p.used_by(c) for c in calls)
        }
    )
    return Audit(denied, unused)


# ---------------------------------------------------------------------------- scheduler configuration

EXTENDER_FIELDS = {
    "urlPrefix",
    "filterVerb",
    "preemptVerb",
    "prioritizeVerb",
    "weight",
    "bindVerb",
    "enableHTTPS",
    "tlsConfig",
    "httpTimeout",
    "nodeCacheCapable",
    "managedResources",
    "ignorable",
}
TLS_FIELDS = {"insecure", "serverName", "certFile", "keyFile", "caFile", "certData", "keyData", "caData"}
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_INT64_MAX = 2**63 - 1


def _qualified_name_errors(value: str) -> list[str]:
    """apimachinery ``IsQualifiedName``: ``[prefix/]name``, name <= 63 chars, prefix a DNS subdomain."""
    prefix, sep, name = value.rpartition("/")
    errors = []
    if sep and not prefix:
        errors.append("prefix part must be non-empty")
    if sep and prefix and (len(prefix) > 253 or not _DNS1123_SUBDOMAIN.match(prefix)):
        errors.append("prefix part must be a lowercase RFC 1123 subdomain")
    if "/" in prefix:
        errors.append("a qualified name must consist of a name and an optional prefix separated by '/'")
    if not name or len(name) > 63 or not _QUALIFIED_NAME.match(name):
        errors.append("name part must consist of alphanumeric characters, '-', '_' or '.', at most 63")
    return errors


def extended_resource_name_errors(value: str) -> list[str]:
    """``IsQualifiedName`` and ``v1helper.IsExtendedResourceName``, as ``validateExtenders`` applies them."""
    errors = _qualified_name_errors(value)
    native = "/" not in value or "kubernetes.io/" in value
    if native or value.startswith("requests."):
        errors.append("is an invalid extended resource name")
    elif _qualified_name_errors("requests." + value):
        errors.append("is an invalid extended resource name (requests.<name> is not a qualified name)")
    return errors


def validate_scheduler_config(config: Mapping[str, Any]) -> list[str]:
    """Problems with a KubeSchedulerConfiguration's extenders, each ``field: reason``; empty when valid.

    kube-scheduler's own rules (``validateExtenders`` and the strict decoder): prioritizeVerb needs a
    positive int64 weight; at most one extender binds; managedResources names are valid extended resource
    names, unique across all extenders; httpTimeout is a Go duration; no unknown fields. Ballast's
    additions, for configurations that load but cannot work: enableHTTPS needs an https:// urlPrefix
    (enableHTTPS does not change the scheme), httpTimeout must not be negative (every call would time out
    at once), and urlPrefix must be an http(s) URL.
    """
    errors: list[str] = []
    if config.get("apiVersion") != "kubescheduler.config.k8s.io/v1":
        errors.append(f"apiVersion: {config.get('apiVersion')!r} is not kubescheduler.config.k8s.io/v1")
    if config.get("kind") != "KubeSchedulerConfiguration":
        errors.append(f"kind: {config.get('kind')!r} is not KubeSchedulerConfiguration")
    extenders = config.get("extenders") or []
    if not isinstance(extenders, list):
        return [*errors, "extenders: must be a list"]
    binders = 0
    seen_resources: set[str] = set()
    for i, ext in enumerate(extenders):
        at = f"extenders[{i}]"
        if not isinstance(ext, Mapping):
            errors.append(f"{at}: must be an object")
            continue
        for key in sorted(set(ext) - EXTENDER_FIELDS):
            errors.append(f'{at}: strict decoding error: unknown field "{key}"')
        url = ext.get("urlPrefix")
        if not isinstance(url, str) or not url:
            errors.append(f"{at}.urlPrefix: Required value")
        elif not re.match(r"^https?://[^/\s]+", url):
            errors.append(f"{at}.urlPrefix: {url!r} is not an http:// or https:// URL")
        for verb in ("filterVerb", "preemptVerb", "prioritizeVerb", "bindVerb"):
            value = ext.get(verb, "")
            if not isinstance(value, str):
                errors.append(f"{at}.{verb}: must be a string")
        weight = ext.get("weight", 0)
        if (
            not isinstance(weight, int)
            or isinstance(weight, bool)
            or not -_INT64_MAX - 1 <= weight <= _INT64_MAX
        ):
            errors.append(f"{at}.weight: {weight!r} is not an int64")
        elif ext.get("prioritizeVerb") and weight <= 0:
            errors.append(f"{at}.weight: Invalid value: {weight}: must have a positive weight applied to it")
        if ext.get("bindVerb"):
            binders += 1
        for flag in ("enableHTTPS", "nodeCacheCapable", "ignorable"):
            if flag in ext and not isinstance(ext[flag], bool):
                errors.append(f"{at}.{flag}: {ext[flag]!r} is not a boolean")
        if ext.get("enableHTTPS") is True and isinstance(url, str) and not url.startswith("https://"):
            errors.append(
                f"{at}.urlPrefix: {url!r} with enableHTTPS: true: the scheme is not changed for you, "
                "use https://"
            )
        tls = ext.get("tlsConfig")
        if tls is not None:
            if not isinstance(tls, Mapping):
                errors.append(f"{at}.tlsConfig: must be an object")
            else:
                for key in sorted(set(tls) - TLS_FIELDS):
                    errors.append(f'{at}.tlsConfig: strict decoding error: unknown field "{key}"')
        if "httpTimeout" in ext:
            timeout = ext["httpTimeout"]
            if isinstance(timeout, str) and timeout.strip().startswith("-"):
                errors.append(f"{at}.httpTimeout: {timeout!r} is negative: every call would time out")
            else:
                try:
                    parse_duration(timeout)
                except ValueError as exc:
                    errors.append(f"{at}.httpTimeout: {exc}")
        resources = ext.get("managedResources") or []
        if not isinstance(resources, list):
            errors.append(f"{at}.managedResources: must be a list")
            resources = []
        for j, res in enumerate(resources):
            rat = f"{at}.managedResources[{j}].name"
            name = res.get("name") if isinstance(res, Mapping) else None
            if not isinstance(name, str) or not name:
                errors.append(f"{rat}: Required value")
                continue
            for problem in extended_resource_name_errors(name):
                errors.append(f"{rat}: Invalid value: {name!r}: {problem}")
            if name in seen_resources:
                errors.append(f"{rat}: Invalid value: {name!r}: duplicate extender managed resource name")
            seen_resources.add(name)
    if binders > 1:
        errors.append(
            f'extenders: Invalid value: "found {binders} extenders implementing bind": '
            "only one extender can implement bind"
        )
    return errors


# -------------------------------------------------------------------------------------------- Dockerfile


@dataclass
class Instruction:
    keyword: str
    value: str
    line: int

    @property
    def exec_form(self) -> list[str] | None:
        """The JSON array of ``CMD``/``ENTRYPOINT``/``COPY``/``RUN`` exec form, else ``None``."""
        text = self.value.strip()
        if not text.startswith("["):
            return None
        try:
            out = json.loads(text)
        except json.JSONDecodeError:
            return None
        return out if isinstance(out, list) and all(isinstance(x, str) for x in out) else None


@dataclass
class Stage:
    image: str
    name: str
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]

    def last(self, keyword: str) -> Instruction | None:
        found = self.all(keyword)
        return found[-1] if found else None


def parse_dockerfile(text: str) -> list[Stage]:
    """Stages and their instructions (line continuations joined, comment lines dropped)."""
    logical: list[tuple[int, str]] = []
    buf: list[str] = []
    start = 0
    for n, raw in enumerate(text.splitlines(), 1):
        if raw.lstrip().startswith("#"):
            continue  # comments, also inside continued instructions
        if not buf:
            if not raw.strip():
                continue
            start = n
        if raw.rstrip().endswith("\\"):
            buf.append(raw.rstrip()[:-1])
            continue
        buf.append(raw)
        logical.append((start, " ".join(s.strip() for s in buf)))
        buf = []
    if buf:
        raise ValueError(f"line {start}: instruction continues past the end of the file")
    stages: list[Stage] = []
    for n, line in logical:
        keyword, _, value = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            words = value.split()
            words = [w for w in words if not w.startswith("--")]
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else ""
            stages.append(Stage(words[0], name))
        elif keyword == "ARG" and not stages:
            continue
        elif not stages:
            raise ValueError(f"line {n}: {keyword} before the first FROM")
        else:
            stages[-1].instructions.append(Instruction(keyword, value.strip(), n))
    return stages


@dataclass
class Copy:
    sources: list[str]
    dest: str
    flags: dict[str, str]


def parse_copy(instruction: Instruction) -> Copy:
    form = instruction.exec_form
    words = shlex.split(instruction.value) if form is None else form
    flags: dict[str, str] = {}
    while words and words[0].startswith("--"):
        key, _, value = words.pop(0)[2:].partition("=")
        flags[key] = value
    if form is not None and instruction.value.lstrip().startswith("--"):
        raise ValueError("flags before a JSON array are not parsed")
    if len(words) < 2:
        raise ValueError(f"line {instruction.line}: COPY needs a source and a destination")
    return Copy(words[:-1], words[-1], flags)


def parse_env(instruction: Instruction) -> dict[str, str]:
    words = shlex.split(instruction.value)
    if words and "=" not in words[0]:  # legacy ENV key value
        return {words[0]: " ".join(words[1:])}
    return dict(w.split("=", 1) for w in words)


class DockerIgnore:
    """``.dockerignore`` matching: patterns relative to the context root, Go ``filepath.Match`` syntax
    with ``**`` for any number of directories, the last matching pattern deciding, ``!`` re-including, and
    a pattern that matches a parent directory applying to everything below it."""

    def __init__(self, text: str) -> None:
        self.patterns: list[tuple[bool, re.Pattern[str]]] = []
        for raw in text.splitlines():
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            include = line.startswith("!")
            line = line[1:].strip() if include else line
            line = line.strip("/")
            line = re.sub(r"/+", "/", line)
            if line in ("", "."):
                continue
            self.patterns.append((include, re.compile(_glob_regex(line))))

    def excluded(self, path: str) -> bool:
        parts = path.strip("/").split("/")
        candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        excluded = False
        for include, pattern in self.patterns:
            if any(pattern.fullmatch(c) for c in candidates):
                excluded = not include
        return excluded


def _glob_regex(pattern: str) -> str:
    out = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**", i):
            i += 2
            if pattern.startswith("/", i):
                out.append("(?:.*/)?")
                i += 1
            else:
                out.append(".*")
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            end = pattern.find("]", i + 1)
            if end < 0:
                raise ValueError(f"unterminated character class in {pattern!r}")
            body = pattern[i + 1 : end]
            out.append("[" + ("^" + body[1:] if body.startswith("^") else body) + "]")
            i = end
        elif c == "\\" and i + 1 < len(pattern):
            i += 1
            out.append(re.escape(pattern[i]))
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


# -------------------------------------------------------------------------------------------------- lock

BUILD_TOOLS = ("grpcio-tools", "setuptools")
"""Installed in the image's build stage (``--no-build-isolation``): they generate the CRI stubs."""

LOCK_HEADER = """\
# Exact versions for the container image (Dockerfile: pip install -c requirements.lock), taken from the
# virtualenv the tests ran in: the runtime dependency closure of ballast, then the build tools.
# Regenerate after changing dependencies: .venv/bin/python -m tests.deploy_rbac lock > requirements.lock
"""


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def runtime_closure(top: str = "ballast") -> dict[str, tuple[str, str]]:
    """canonical name -> (project name, installed version) for everything ``top`` needs at run time."""
    from importlib.metadata import distribution

    from packaging.requirements import Requirement

    seen: dict[str, tuple[str, str]] = {}
    todo = [Requirement(r) for r in distribution(top).requires or []]
    while todo:
        req = todo.pop()
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        key = canonical(req.name)
        if key in seen:
            continue
        dist = distribution(req.name)
        seen[key] = (dist.metadata["Name"], dist.version)
        todo.extend(Requirement(r) for r in dist.requires or [])
    return seen


def lock_lines() -> list[str]:
    from importlib.metadata import distribution

    runtime = runtime_closure()
    lines = [f"{name}=={version}" for _, (name, version) in sorted(runtime.items())]
    lines.append(
        "# build only: setup.py generates the CRI gRPC stubs with grpcio-tools (it must match grpcio)"
    )
    for tool in BUILD_TOOLS:
        if canonical(tool) not in runtime:
            dist = distribution(tool)
            lines.append(f"{dist.metadata['Name']}=={dist.version}")
    return lines


def read_lock(path: Path) -> dict[str, tuple[str, str]]:
    """canonical name -> (name as written, version) of every ``name==version`` line."""
    out: dict[str, tuple[str, str]] = {}
    for n, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9.+!_-]+)", line)
        if not m:
            raise ValueError(f"{path.name}:{n}: {raw!r} is not name==version")
        key = canonical(m.group(1))
        if key in out:
            raise ValueError(f"{path.name}:{n}: {m.group(1)} is pinned twice")
        out[key] = (m.group(1), m.group(2))
    return out


def main(argv: Sequence[str]) -> int:
    if list(argv) != ["lock"]:
        print("usage: python -m tests.deploy_rbac lock > requirements.lock", file=sys.stderr)
        return 2
    sys.stdout.write(LOCK_HEADER + "\n".join(lock_lines()) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
