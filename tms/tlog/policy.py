"""Who must have cosigned a checkpoint before a member believes it (C2SP `tlog-policy`).

A policy file names logs (`log <vkey> [<url>]`), witnesses (`witness <name> <vkey> [<url>]`),
groups (`group <name> all|any|<k> <member>...`) and one `quorum <name>` (or `quorum none`).
The server reads one (`TMS_WITNESS_POLICY`) to know whom to submit its checkpoints to; a member
reads one (`tms verify-export --policy`, `tms mirror --policy`) to refuse a checkpoint that
not enough independent witnesses have seen: a server showing two members two histories (a split
view) cannot get both cosigned by honest witnesses, each of which only signs a checkpoint that
extends the last one it signed.

Pure: text in, a `Policy` out; `Policy.judge` takes a signed note and says which witnesses
cosigned it and whether the quorum holds. Unknown signature lines are ignored, as the spec says;
a line that claims to be a known witness's and does not verify is refused with its name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final, TypeVar

from tms.errors import LogError, shown
from tms.tlog.cosignature import Cosignature, CosignerVerifier
from tms.tlog.note import NoteVerifier, split_note

NONE: Final = "none"
MAX_ENTRIES: Final = 256  # logs, witnesses and groups together; the spec asks for 32 of each
MAX_POLICY_BYTES: Final = 64 * 1024
K = TypeVar("K", NoteVerifier, CosignerVerifier)


@dataclass(frozen=True, slots=True)
class Witness:
    name: str  # the policy's name for it
    key: CosignerVerifier
    url: str | None  # its submission prefix (tlog-witness), where the log sends checkpoints


@dataclass(frozen=True, slots=True)
class Group:
    name: str
    threshold: int
    members: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Verdict:
    """What a policy makes of one checkpoint's cosignatures."""

    cosigned_by: tuple[Cosignature, ...]  # by known witnesses, verified, in policy order
    quorum: bool
    needed: str  # the quorum, in words ("2 of X1, X2, X3")

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.cosigned_by]


@dataclass(frozen=True, slots=True)
class Policy:
    logs: tuple[NoteVerifier, ...] = ()
    witnesses: Mapping[str, Witness] = field(default_factory=dict)
    groups: Mapping[str, Group] = field(default_factory=dict)
    quorum: str = NONE

    @classmethod
    def parse(cls, text: str) -> Policy:
        if len(text.encode("utf-8", "surrogatepass")) > MAX_POLICY_BYTES:
            raise LogError(f"the policy is longer than {MAX_POLICY_BYTES:,} bytes")
        logs: list[NoteVerifier] = []
        witnesses: dict[str, Witness] = {}
        groups: dict[str, Group] = {}
        quorum: str | None = None
        keys: set[bytes] = set()
        for number, raw in enumerate(text.split("\n"), 1):
            if any(c < " " and c != "\t" for c in raw) or "\x7f" in raw:
                raise LogError(f"policy line {number}: only tab may be a control character")
            words = raw.replace("\t", " ").split()
            if not words or words[0].startswith("#"):
                continue
            where = f"policy line {number}"
            if len(logs) + len(witnesses) + len(groups) >= MAX_ENTRIES:
                raise LogError(f"{where}: more than {MAX_ENTRIES} logs, witnesses and groups")
            keyword, args = words[0], words[1:]
            if keyword == "log":
                if len(args) not in (1, 2):
                    raise LogError(f"{where}: a log line is 'log <vkey> [<url>]'")
                verifier = _parsed(NoteVerifier.parse, args[0], where)
                if verifier.public in keys:
                    raise LogError(f"{where}: this key is already listed")
                keys.add(verifier.public)
                logs.append(verifier)
            elif keyword == "witness":
                if len(args) not in (2, 3):
                    raise LogError(f"{where}: a witness line is 'witness <name> <vkey> [<url>]'")
                name = _new_name(args[0], witnesses, groups, where)
                key = _parsed(CosignerVerifier.parse, args[1], where)
                if key.public in keys:
                    raise LogError(f"{where}: this key is already listed")
                keys.add(key.public)
                witnesses[name] = Witness(name, key, args[2] if len(args) == 3 else None)
            elif keyword == "group":
                if len(args) < 3:
                    raise LogError(f"{where}: a group line is 'group <name> all|any|<k> <name>...'")
                name = _new_name(args[0], witnesses, groups, where)
                members = tuple(args[2:])
                for member in members:
                    if member not in witnesses and member not in groups:
                        raise LogError(f"{where}: {shown(member)!r} is not defined above")
                if len(set(members)) != len(members):
                    raise LogError(f"{where}: a member is listed twice")
                threshold = _threshold(args[1], len(members), where)
                groups[name] = Group(name, threshold, members)
            elif keyword == "quorum":
                if quorum is not None:
                    raise LogError(f"{where}: a policy has exactly one quorum line")
                if len(args) != 1:
                    raise LogError(f"{where}: a quorum line is 'quorum <name>'")
                if args[0] != NONE and args[0] not in witnesses and args[0] not in groups:
                    raise LogError(f"{where}: {shown(args[0])!r} is not defined above")
                quorum = args[0]
            else:
                raise LogError(f"{where}: unknown keyword {shown(keyword)!r}")
        if quorum is None:
            raise LogError("the policy has no quorum line ('quorum <name>' or 'quorum none')")
        return cls(tuple(logs), witnesses, groups, quorum)

    def judge(self, note: str) -> Verdict:
        """The witnesses of this policy that cosigned `note`, and whether they make the
        quorum. A cosignature that claims to be a known witness's and does not verify is a
        `LogError` naming that witness: a note carrying a forged line is not trusted at all."""
        text, signatures = split_note(note)
        found = []
        for witness in self.witnesses.values():
            try:
                cosignature = witness.key.find(text, signatures)
            except LogError as exc:
                raise LogError(f"witness {witness.name}: {exc}") from None
            if cosignature is not None:
                found.append(cosignature)
        signed = {
            name for name, w in self.witnesses.items() if any(c.name == w.key.name for c in found)
        }
        return Verdict(tuple(found), self._holds(self.quorum, signed), self.describe())

    def _holds(self, name: str, signed: set[str]) -> bool:
        if name == NONE:
            return True
        if name in self.witnesses:
            return name in signed
        group = self.groups[name]
        return sum(self._holds(m, signed) for m in group.members) >= group.threshold

    def describe(self, name: str | None = None) -> str:
        """The quorum (or a group) in words, for messages."""
        name = self.quorum if name is None else name
        if name == NONE:
            return "no witness"
        if name in self.witnesses:
            return f"witness {name}"
        group = self.groups[name]
        members = ", ".join(self.describe(m) if m in self.groups else m for m in group.members)
        return f"{group.threshold} of {len(group.members)} ({members})"

    def submission_targets(self) -> list[Witness]:
        """The witnesses a log sends its checkpoints to: those with a URL."""
        return [w for w in self.witnesses.values() if w.url is not None]

    def named(self, keys: Iterable[str]) -> list[str]:
        """The policy's names of the witnesses whose key names are `keys`."""
        wanted = set(keys)
        return [w.name for w in self.witnesses.values() if w.key.name in wanted]


def _parsed(parse: Callable[[str], K], text: str, where: str) -> K:
    try:
        return parse(text)
    except LogError as exc:
        raise LogError(f"{where}: {exc}") from None


def _new_name(
    name: str, witnesses: Mapping[str, Witness], groups: Mapping[str, Group], where: str
) -> str:
    if name == NONE:
        raise LogError(f"{where}: 'none' is predefined and cannot be redefined")
    if name in witnesses or name in groups:
        raise LogError(f"{where}: the name {shown(name)!r} is already defined")
    return name


def _threshold(word: str, members: int, where: str) -> int:
    if word == "all":
        return members
    if word == "any":
        return 1
    if not word.isdigit() or (len(word) > 1 and word[0] == "0"):
        raise LogError(f"{where}: a group's threshold is all, any or a number")
    k = int(word)
    if not 1 <= k <= members:
        raise LogError(f"{where}: the threshold {k} is not between 1 and {members}")
    return k
