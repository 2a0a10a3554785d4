"""The pod-side Python of a verified transfer (run with ``python3 -I -S -c``, standard library
only, Python 3.4+: no f-strings): each file is hashed as it passes, in the one process that
unpacks or packs the tar stream, so there is no second read and no second pass. No tarfile,
json or base64 (with ``re``, their imports would double the start-up time): the ustar/PAX
headers are read and written here. Files are hashed in segments, with a mark every
``CHECKPOINT`` bytes and at the end (``resume.py``): a transfer whose stream ended early goes
on from the last mark both sides agree on.

``UNTAR_PY NAME MODE:TOKEN`` (upload, run in the destination's parent). ``new``: the tar stream
on stdin is unpacked into the staging directory ``.trainjob-upload-TOKEN/data`` (the marks go
to ``.trainjob-upload-TOKEN/journal``), then the trailer is read (the segments the client sent,
with their sha256); only when every one matches what landed are the files moved into place, a
rename each (existing files replaced, directories merged, modes and mtimes kept, like ``tar xf
-``), and listed on stdout (``#trainjob-python``, then their marks). A stream that ends early
exits 3 (``#trainjob-cut`` on stderr) and the staging directory stays for a retry; any other
failure (a file that cannot be written, a bad stream, a mismatch) exits 2 at once with a
one-line message. The ``sh`` around it removes the staging directory after exit 0 or 2.
``resume``: as ``new``, into the staging directory that is there; a member may start inside a
file (PAX ``TRAINJOB.offset``): the staged copy is cut to that byte and appended to.
Each attempt holds a shared ``flock`` on ``.trainjob-upload-TOKEN/lock`` while it runs. A
``new`` upload first *sweeps* its directory (:data:`SWEEP`): the staging directories of uploads
that never ended (the client killed, its kernel restarted) are removed when no process holds
their lock and nothing in them changed (ctime) for ``STALE`` seconds (set by the client, far
above the gap between two attempts of a live upload: :func:`untar_code`); each is renamed to
``.trainjob-upload-gone-*`` first (no attempt can start in it any more) and then removed, and
named on stderr (``#trainjob-swept HEXNAME``).
``PROBE_PY NAME probe:TOKEN``: stops an earlier attempt of TOKEN that still runs (its argv ends
in ``new:TOKEN`` or ``resume:TOKEN``; a hand-over in progress is waited for), then prints the
journal (``#trainjob-nostage``: nothing to go on from). ``CLEAN_PY NAME clean:TOKEN``: stops
them the same way, waits for a hand-over under way (tar's too: ``handover`` in the stage, up to
20 s; ``#trainjob-handedover`` on stdout once it ended), then removes the staging directory (an
upload that failed or was stopped).

``PACK_PY NAME MODE:TOKEN`` (download, run in the source's parent): writes ``NAME`` as a tar
stream (ustar, PAX records where needed; links kept as links, hard links once) to stdout like
``tar cf - -- NAME``, and ``#trainjob-python`` then the files' marks (with each file's
``size:mtime_ns``) to stderr. ``resume`` first stops the earlier attempt, as the probe does, and
reads from stdin ``LENGTH\\n``, then lines ``s HEXPATH`` (skip it) and ``o OFFSET IDENT HEXPATH``
(start there, if the file is unchanged). It continues past a file it cannot read (a one-line
message on stderr) and exits 2 at the end, as GNU tar does.
"""

from __future__ import annotations

from .resume import CHECKPOINT

_COMMON = r"""
import binascii, hashlib, os, stat, sys
BIG = 1 << 20
CHECK = @CHECKPOINT@
ZERO = bytes(512)
def big_pipe(fd):
    try:
        import fcntl
        fcntl.fcntl(fd, 1031, BIG)  # F_SETPIPE_SZ: fewer, larger pipe reads/writes
    except Exception:
        pass
SPARE = memoryview(bytearray(BIG))  # every data read goes here: no fresh memory per read
def text(raw):  # paths are bytes here (whatever the locale); messages are UTF-8
    return raw.decode("utf-8", "surrogateescape")
def hexname(raw):
    return binascii.hexlify(raw).decode("ascii")
def say(path, msg):
    sys.stderr.write("tar: " + text(path) + ": " + msg + "\n")
def why(exc):
    return exc.strerror or str(exc)
def put(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
def markline(final, start, end, sha, ident, path):
    return "#trainjob-%s %d %d %s %s %s\n" % (
        "file" if final else "part", start, end, sha, ident, hexname(path))
class Hasher:  # sha256 from byte start on; record(end, hex, final) every CHECK bytes and at the end
    def __init__(self, start, record):
        self.sha, self.pos, self.record = hashlib.sha256(), start, record
        self.next = (start // CHECK + 1) * CHECK
    def update(self, view):
        while len(view) >= self.next - self.pos:
            room = self.next - self.pos
            self.sha.update(view[:room])
            self.pos, self.next = self.next, self.next + CHECK
            self.record(self.pos, self.sha.copy().hexdigest(), False)
            view = view[room:]
        if len(view):
            self.sha.update(view)
            self.pos += len(view)
    def finish(self):
        self.record(self.pos, self.sha.hexdigest(), True)
""".replace("@CHECKPOINT@", str(CHECKPOINT))

_STOP = r"""
import time
def attempt_of(pid, tags):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as fh:
            args = [a for a in fh.read().split(b"\0") if a]
    except (OSError, ValueError):
        return False
    return len(args) >= 4 and args[1:4] == [b"-I", b"-S", b"-c"] and args[-1] in tags
def stop_others(token, patient=lambda: False):
    # an earlier attempt of this transfer may still run (its output drained, its stdin open):
    # stop it, and wait until it is gone (a zombie has no cmdline)
    tags = [("new:" + token).encode(), ("resume:" + token).encode()]
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()]
    except OSError:
        return
    found = [p for p in pids if attempt_of(p, tags)]
    for sig in (15, 9):
        for pid in found:
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        deadline = time.time() + 10
        while found and (time.time() < deadline or patient()):
            found = [p for p in found if attempt_of(p, tags)]
            if found:
                time.sleep(0.01)
        if not found:
            return
"""

# The staging directories of uploads that never ended (run in the destination's parent).
SWEEP = r"""
import time
PREFIX = b".trainjob-upload-"
def fresh(path, since):  # something under path changed (ctime) after since; True if unsure
    try:
        if os.lstat(path).st_ctime > since:
            return True
        for root, dirs, files in os.walk(path):
            for name in dirs + files:
                try:
                    if os.lstat(os.path.join(root, name)).st_ctime > since:
                        return True
                except OSError:
                    pass
    except OSError:
        return True
    return False
def remove_tree(path):
    for root, dirs, files in os.walk(path, topdown=False):
        for name in files + dirs:
            child = os.path.join(root, name)
            try:
                if name in dirs and not os.path.islink(child):
                    os.rmdir(child)
                else:
                    os.unlink(child)
            except OSError:
                pass
    try:
        os.rmdir(path)
    except OSError:
        pass
def unlocked(stage):  # no process holds the stage's lock: the fd, locked (None: no lock)
    try:
        fd = os.open(stage + b"/lock", os.O_RDONLY)
    except OSError:
        return None
    try:
        import fcntl
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except (BlockingIOError, PermissionError):
        os.close(fd)
        return False  # held
    except (ImportError, OSError):
        os.close(fd)
        return None  # no flock here: the age alone decides
    return fd
def trash(stage):  # rename it where no attempt can start in it, then remove it
    gone = PREFIX + b"gone-" + binascii.hexlify(os.urandom(6))
    os.rename(stage, gone)
    remove_tree(gone)
def sweep(stale, own):
    since = time.time() - stale
    try:
        entries = [e.name for e in os.scandir(b".") if e.name.startswith(PREFIX)]
    except OSError:
        return
    for name in entries:
        rest = name[len(PREFIX):]
        if name == own or os.path.islink(name) or not os.path.isdir(name):
            continue
        if rest.startswith(b"gone-"):  # a sweep that stopped halfway (or runs now)
            remove_tree(name)
            continue
        if not rest or rest.strip(b"0123456789abcdef"):
            continue
        fd = unlocked(name)
        if fd is False:
            continue  # an attempt of that upload runs
        try:
            if not fresh(name, since):
                trash(name)
                sys.stderr.write("#trainjob-swept " + hexname(name) + "\n")
        except OSError:
            pass
        finally:
            if fd is not None:
                os.close(fd)
"""

UNTAR_PY = (
    _COMMON
    + SWEEP
    + r"""
STALE = @STALE@
class TarError(Exception):
    pass
class Cut(Exception):  # the stream ended before its end: the staging directory stays
    pass
class Failed(Exception):  # (path, message): a file could not be written; give up at once
    pass
class Stdin:
    def __init__(self):
        self.buf, self.pos, self.off = b"", 0, 0
    def read(self, n):
        have = len(self.buf) - self.pos
        if have < n:
            parts, got = [self.buf[self.pos:]], have
            while got < n:
                more = os.read(0, max(n - got, BIG))
                if not more:
                    break
                parts.append(more)
                got += len(more)
            self.buf, self.pos = b"".join(parts), 0
        out = self.buf[self.pos:self.pos + n]
        self.pos += len(out)
        self.off += len(out)
        return out
    def exact(self, n):
        out = self.read(n)
        if len(out) != n:
            raise Cut("the tar stream ended early")
        return out
    def skip(self, where):
        while self.off < where:
            self.exact(min(where - self.off, BIG))
    def data(self, n):
        while n > 0:
            have = len(self.buf) - self.pos
            if have:
                piece = memoryview(self.buf)[self.pos:self.pos + n]
                self.pos += len(piece)
            else:
                got = os.readv(0, [SPARE[:min(n, BIG)]])
                if not got:
                    raise Cut("the tar stream ended inside a file")
                piece = SPARE[:got]
            self.off += len(piece)
            n -= len(piece)
            yield piece
    def rest(self):  # what is buffered, then what arrives (b"" at the end)
        if self.pos < len(self.buf):
            out, self.buf, self.pos = self.buf[self.pos:], b"", 0
            return out
        return os.read(0, BIG)
def field(raw):
    return raw.split(b"\0", 1)[0]
def number(raw):  # the client's tarfile writes PAX records for what octal cannot hold
    digits = field(raw).strip(b" ")
    return int(digits, 8) if digits else 0
def pax_records(raw):
    out, pos = {}, 0
    while pos < len(raw):
        space = raw.index(b" ", pos)
        length = int(raw[pos:space])
        key, _, value = raw[space + 1:pos + length - 1].partition(b"=")
        out[key] = value
        pos += length
    return out
class Member:
    pass
def members(src):  # the client's tar stream: PAX format (no GNU long names, no prefix field)
    pax = {}
    while True:
        block = src.exact(512)
        if block == ZERO:
            return
        if sum(block[:148]) + 256 + sum(block[156:]) != number(block[148:156]):
            raise TarError("bad header checksum at byte %d" % (src.off - 512))
        kind, size = block[156:157], number(block[124:136])
        if kind in (b"x", b"g"):
            data = src.exact(-(-size // 512) * 512)[:size]
            if kind == b"x":
                pax = pax_records(data)
            continue
        m = Member()
        m.name = pax.get(b"path", field(block[:100]))
        m.linkname = pax.get(b"linkpath", field(block[157:257]))
        m.size = int(pax[b"size"]) if b"size" in pax else size
        m.offset = int(pax.get(b"TRAINJOB.offset") or 0)
        m.mtime = int(float(pax[b"mtime"])) if b"mtime" in pax else number(block[136:148])
        m.mode = number(block[100:108]) & 0o7777
        m.kind = b"0" if kind in (b"\0", b"7") else kind
        m.offset_data = src.off
        pax = {}
        yield m
        src.skip(m.offset_data + -(-m.size // 512) * 512)
class Journal:  # the marks of what landed, kept for a retry (seg lines: a file started there)
    def __init__(self, path, resuming):
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self.rows, self.resuming = [], resuming
    def add(self, line, now=False):
        self.rows.append(line)
        if now or len(self.rows) >= 256:
            self.flush()
    def flush(self):
        if self.rows:
            put(self.fd, "".join(self.rows).encode("ascii"))
            self.rows = []
def replace(path):
    try:
        if not os.path.isdir(path) or os.path.islink(path):
            os.unlink(path)
    except FileNotFoundError:
        pass
MADE = set()
def parent(path):
    d = os.path.dirname(path)
    if d and d not in MADE:
        if not os.path.isdir(d):
            os.makedirs(d)
        MADE.add(d)
def unpack_file(src, m, name, keep, journal):
    start = m.offset
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    try:
        parent(name)
        if start:
            fd = os.open(name, os.O_WRONLY)
            if os.fstat(fd).st_size < start:
                os.close(fd)
                raise Failed(name, "the staged copy is shorter than byte %d" % start)
            os.ftruncate(fd, start)
            os.lseek(fd, start, 0)
        else:
            try:
                fd = os.open(name, flags | os.O_EXCL, 0o600)  # new: nothing to replace
            except FileExistsError:
                replace(name)
                fd = os.open(name, flags, 0o600)
    except OSError as exc:
        raise Failed(name, why(exc))
    journal.add("#trainjob-seg %d %s\n" % (start, hexname(name)), journal.resuming)
    h = Hasher(start, lambda end, sha, final: journal.add(
        markline(final, start, end, sha, "-", name), not final))
    try:
        for piece in src.data(m.size):
            view = piece
            while view:
                try:
                    view = view[os.write(fd, view):]
                except OSError as exc:
                    raise Failed(name, why(exc))
            h.update(piece)  # after the write: a mark only ever covers bytes written
        try:
            os.fchmod(fd, m.mode & ~keep)
            os.utime(fd, (m.mtime, m.mtime))
        except OSError as exc:
            raise Failed(name, why(exc))
    finally:
        os.close(fd)
    h.finish()
def unpack(src, top, keep, journal):
    dirs = []
    for m in members(src):
        name = m.name.rstrip(b"/") or m.name
        if name.startswith(b"./"):
            name = name[2:]
        if name != top and not name.startswith(top + b"/") or b".." in name.split(b"/"):
            raise TarError("member outside " + text(top) + ": " + text(name))
        if m.kind == b"0":
            unpack_file(src, m, name, keep, journal)
            continue
        try:
            if m.kind == b"5":
                if not os.path.isdir(name):
                    replace(name)
                    os.makedirs(name)
                MADE.add(name)
                dirs.append((name, m))
            elif m.kind in (b"1", b"2"):
                parent(name)
                replace(name)
                if m.kind == b"2":
                    os.symlink(m.linkname, name)
                else:
                    os.link(m.linkname.rstrip(b"/"), name)
        except OSError as exc:
            raise Failed(name, why(exc))
    return dirs
def expected(src):  # the trailer: {path: [(start, end, sha256)]}
    data, lines = b"", []
    while b"#trainjob-end" not in lines[:-1]:
        more = src.rest()
        if not more:
            raise Cut("the stream ended before its list of files")
        data = (data + more).lstrip(b"\0")
        lines = data.split(b"\n")
    lines = lines[:lines.index(b"#trainjob-end")]
    if not lines or lines[0] != b"#trainjob-expect":
        raise TarError("no list of files after the tar stream")
    want = {}
    for line in lines[1:]:
        start, end, sha, path = line.decode("ascii").split(" ")
        want.setdefault(binascii.unhexlify(path), []).append((int(start), int(end), sha))
    return want
def replay(path):  # the journal: {name: {(start, end): sha256}}
    marks = {}
    with open(path, "rb") as fh:
        rows = fh.read().decode("ascii", "replace").split("\n")
    for row in rows:
        parts = row.split(" ")
        try:
            if parts[0] == "#trainjob-seg" and len(parts) == 3:
                name, start = binascii.unhexlify(parts[2]), int(parts[1])
                old = marks.get(name, {}) if start else {}
                marks[name] = dict((k, v) for k, v in old.items() if k[1] <= start)
            elif parts[0] in ("#trainjob-part", "#trainjob-file") and len(parts) == 6:
                key = (int(parts[1]), int(parts[2]))
                marks.setdefault(binascii.unhexlify(parts[5]), {})[key] = parts[3]
        except ValueError:  # a line cut short by a stopped attempt
            pass
    return marks
FAILED = []
def handover(src, dest):  # one rename per file; directories merge into existing ones
    try:
        if os.path.isdir(src) and not os.path.islink(src):
            if os.path.isdir(dest) and not os.path.islink(dest):
                for child in sorted(os.listdir(src)):
                    handover(src + b"/" + child, dest + b"/" + child)
                return
            if os.path.lexists(dest):
                os.unlink(dest)
        elif os.path.isdir(dest) and not os.path.islink(dest):
            say(dest, "Cannot replace a directory with a file")
            FAILED.append(dest)
            return
        os.rename(src, dest)
    except OSError as exc:
        say(dest, why(exc))
        FAILED.append(dest)
def hold(stage):  # a shared lock on the stage while this attempt runs (a sweep keeps off)
    try:
        fd = os.open(stage + b"/lock", os.O_RDONLY | os.O_CREAT, 0o600)
    except OSError:
        return False  # the stage went away
    try:
        import fcntl
        fcntl.flock(fd, fcntl.LOCK_SH)
    except (ImportError, OSError):
        pass  # no flock here: the sweep goes by age alone
    return True
def placed(name):
    return not any(name == f or name.startswith(f + b"/") for f in FAILED)
def main():
    top = os.fsencode(sys.argv[1])
    mode, _, token = sys.argv[2].partition(":")
    stage = (".trainjob-upload-" + token).encode("ascii")
    data, journal_path, handing = stage + b"/data", stage + b"/journal", stage + b"/handover"
    if mode == "new":
        os.makedirs(data)
    if not hold(stage) or not os.path.isdir(data) or os.path.exists(handing):
        sys.stderr.write("#trainjob-nostage\n")  # swept, or handed over: start again
        return 4
    if mode == "new" and STALE >= 0:
        sweep(STALE, stage)
    big_pipe(0)
    umask = os.umask(0)
    os.umask(umask)
    keep = 0 if os.geteuid() == 0 else umask
    journal = Journal(journal_path, mode == "resume")
    src = Stdin()
    os.chdir(data)
    try:
        try:
            dirs = unpack(src, top, keep, journal)
            want = expected(src)
        finally:
            journal.flush()
            os.close(journal.fd)
            os.chdir(b"../..")
    except Cut as exc:
        sys.stderr.write("#trainjob-cut " + str(exc) + "\n")
        return 3
    except Failed as exc:
        say(exc.args[0], exc.args[1])
        return 2
    except (TarError, ValueError, OSError) as exc:
        sys.stderr.write("tar: the tar stream could not be unpacked: " + str(exc) + "\n")
        return 2
    marks = replay(journal_path)
    bad = []
    for name, segs in want.items():
        have = marks.get(name, {})
        try:
            size = os.lstat(data + b"/" + name).st_size
        except OSError:
            size = -1
        if size != segs[-1][1] or any(have.get((s, e)) != sha for s, e, sha in segs):
            bad.append(name)
    if bad:  # what landed, for the client to name the files
        rows = ["#trainjob-python\n"]
        for name, segs in want.items():
            have = marks.get(name, {})
            rows += [markline(i == len(segs) - 1, s, e, have.get((s, e), "-"), "-", name)
                     for i, (s, e, sha) in enumerate(segs)]
        put(1, "".join(rows).encode("ascii"))
        more = " (and %d more)" % (len(bad) - 1) if len(bad) > 1 else ""
        sys.stderr.write("tar: integrity check failed: " + text(bad[0]) + " differs from what "
                         "was sent" + more + "; nothing was placed\n")
        return 2
    import signal
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a hand-over is never cut short
    open(handing, "wb").close()
    handover(data + b"/" + top, top)
    for name, m in reversed(dirs):
        try:
            if os.path.isdir(name) and not os.path.islink(name):
                os.chmod(name, m.mode & ~keep)
                os.utime(name, (m.mtime, m.mtime))
        except OSError:
            pass
    rows = ["#trainjob-python\n"]
    for name, segs in want.items():
        if placed(name):
            rows += [markline(i == len(segs) - 1, s, e, sha, "-", name)
                     for i, (s, e, sha) in enumerate(segs)]
    put(1, "".join(rows).encode("ascii"))
    return 2 if FAILED else 0
try:
    sys.exit(main())
except (OSError, ValueError) as exc:
    sys.stderr.write("tar: the tar stream could not be unpacked: " + str(exc) + "\n")
    sys.exit(2)
"""
)

PROBE_PY = (
    _COMMON
    + _STOP
    + r"""
def main():
    token = sys.argv[2].partition(":")[2]
    stage = (".trainjob-upload-" + token).encode("ascii")
    handing = stage + b"/handover"
    stop_others(token, lambda: os.path.exists(handing))
    if not os.path.isdir(stage + b"/data") or os.path.exists(handing):
        put(1, b"#trainjob-nostage\n")
        return 0
    with open(stage + b"/journal", "ab+") as fh:
        fh.seek(0)
        put(1, b"#trainjob-python\n" + fh.read())
    return 0
sys.exit(main())
"""
)

CLEAN_PY = (
    _COMMON
    + _STOP
    + SWEEP
    + r"""
def main():
    token = sys.argv[2].partition(":")[2]
    stage = (".trainjob-upload-" + token).encode("ascii")
    handing = stage + b"/handover"
    seen = os.path.exists(handing)
    stop_others(token, lambda: os.path.exists(handing))
    deadline = time.time() + 20  # tar's hand-over (a shell, no attempt of ours) ends first
    while os.path.exists(handing) and time.time() < deadline:
        seen = True
        time.sleep(0.05)
    if seen and not os.path.exists(handing):
        put(1, b"#trainjob-handedover\n")  # the checked copy is in place
    if os.path.isdir(stage) and not os.path.islink(stage):
        trash(stage)
    return 0
sys.exit(main())
"""
)

PACK_PY = (
    _COMMON
    + _STOP
    + r"""
OUT = 1
def emit(data):
    view = memoryview(data)
    while view:
        view = view[os.write(OUT, view):]
def octal(n, width):
    return ("%0*o" % (width - 1, n)).encode("ascii") + b"\0"
def pax_record(key, value):
    body = b" " + key + b"=" + value + b"\n"
    n = len(body) + 1
    while len(str(n)) + len(body) != n:
        n = len(str(n)) + len(body)
    return str(n).encode("ascii") + body
def block(name, mode, uid, gid, size, mtime, kind, linkname=b"", major=0, minor=0):
    head = (name[:100].ljust(100, b"\0") + octal(mode, 8) + octal(uid, 8) + octal(gid, 8)
            + octal(size, 12) + octal(mtime, 12) + b" " * 8 + kind
            + linkname[:100].ljust(100, b"\0") + b"ustar\x0000" + bytes(64)
            + octal(major, 8) + octal(minor, 8) + bytes(167))
    total = sum(head)
    return head[:148] + ("%06o" % total).encode("ascii") + b"\0 " + head[156:]
def header(path, st, kind, linkname=b"", size=0, extra=b""):
    name = path + (b"/" if kind == b"5" else b"")
    numbers = [(b"uid", st.st_uid, 8), (b"gid", st.st_gid, 8), (b"size", size, 12),
               (b"mtime", int(st.st_mtime), 12)]
    records = b"".join(pax_record(k, str(v).encode("ascii"))
                       for k, v, width in numbers if not 0 <= v < 8 ** (width - 1))
    if len(name) > 100:
        records += pax_record(b"path", name)
    if len(linkname) > 100:
        records += pax_record(b"linkpath", linkname)
    records += extra
    fit = [v if 0 <= v < 8 ** (width - 1) else 0 for _, v, width in numbers]
    if records:
        emit(block(b"././@PaxHeader", 0o644, 0, 0, len(records), 0, b"x") + records
             + bytes(-len(records) % 512))
    major = minor = 0
    if kind in (b"3", b"4"):
        major, minor = os.major(st.st_rdev), os.minor(st.st_rdev)
    emit(block(name, stat.S_IMODE(st.st_mode), fit[0], fit[1], fit[2], fit[3], kind, linkname,
               major, minor))
class Packer:
    def __init__(self, skip, resume):
        self.rc, self.links, self.skip, self.resume, self.rows = 0, {}, skip, resume, []
    def mark(self, line, now):
        self.rows.append(line)
        if now or len(self.rows) >= 64:
            self.flush()
    def flush(self):
        if self.rows:
            put(2, "".join(self.rows).encode("ascii"))
            self.rows = []
    def walk(self, top):
        out, todo = [], [top]
        while todo:
            path = todo.pop()
            try:
                st = os.lstat(path)
                names = sorted(os.listdir(path)) if stat.S_ISDIR(st.st_mode) else []
            except OSError as exc:
                self.fail(path, exc)
                continue
            out.append((path, st))
            todo.extend(path + b"/" + name for name in reversed(names))
        return out
    def pack(self, top):
        # directories first (parents before children), then links, then files from the
        # smallest: the receiver creates the many small files while large ones still arrive
        entries = self.walk(top)
        def order(item):
            i, (path, st) = item
            if stat.S_ISDIR(st.st_mode):
                return (0, 0, i)
            return (2, st.st_size, i) if stat.S_ISREG(st.st_mode) else (1, 0, i)
        for _, (path, st) in sorted(enumerate(entries), key=order):
            self.add(path, st)
    def add(self, path, st):
        mode = st.st_mode
        if path in self.skip:  # the client has it already
            if stat.S_ISREG(mode) and st.st_nlink > 1:
                self.links.setdefault((st.st_dev, st.st_ino), path)
            return
        if stat.S_ISREG(mode):
            key = (st.st_dev, st.st_ino)
            if st.st_nlink > 1 and key in self.links:
                return header(path, st, b"1", self.links[key])
            if self.file(path, st) and st.st_nlink > 1:
                self.links[key] = path
        elif stat.S_ISDIR(mode):
            header(path, st, b"5")
        elif stat.S_ISLNK(mode):
            try:
                target = os.readlink(path)
            except OSError as exc:
                return self.fail(path, exc)
            header(path, st, b"2", target)
        elif stat.S_ISSOCK(mode):
            say(path, "socket ignored")
        else:
            header(path, st, b"6" if stat.S_ISFIFO(mode) else (
                b"3" if stat.S_ISCHR(mode) else b"4"))
    def file(self, path, st):
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        except OSError as exc:
            return self.fail(path, exc)
        size, ident, start, extra = st.st_size, "%d:%d" % (st.st_size, st.st_mtime_ns), 0, b""
        want = self.resume.get(path)
        if want is not None and want[1] == ident and 0 < want[0] <= size:
            start = want[0]  # the rest of a file the client has the start of
            extra = pax_record(b"TRAINJOB.offset", str(start).encode("ascii"))
        h = Hasher(start, lambda end, sha, final: self.mark(
            markline(final, start, end, sha, ident, path), not final))
        try:
            left = size - start
            header(path, st, b"0", size=left, extra=extra)
            if start:
                os.lseek(fd, start, 0)
            while left:
                got = os.readv(fd, [SPARE[:min(left, BIG)]])
                if not got:
                    say(path, "file shrank while it was read; padded with zeros")
                    self.rc = 1
                    SPARE[:min(left, BIG)] = bytes(min(left, BIG))
                    got = min(left, BIG)
                emit(SPARE[:got])
                h.update(SPARE[:got])
                left -= got
            emit(bytes(-(size - start) % 512))
            if os.fstat(fd).st_size != size:
                say(path, "file changed as we read it")
                self.rc = max(self.rc, 1)
        finally:
            os.close(fd)
        h.finish()
        return True
    def fail(self, path, exc):
        say(path, why(exc))
        self.rc = 2
def read_spec():  # "LENGTH\n", then "s HEXPATH" / "o OFFSET IDENT HEXPATH" lines
    head = b""
    while not head.endswith(b"\n"):
        c = os.read(0, 1)
        if not c:
            raise OSError("the list of what to resume ended early")
        head += c
    n, body = int(head), b""
    while len(body) < n:
        more = os.read(0, n - len(body))
        if not more:
            raise OSError("the list of what to resume ended early")
        body += more
    skip, resume = set(), {}
    for line in body.split(b"\n"):
        parts = line.split(b" ")
        if parts[0] == b"s" and len(parts) == 2:
            skip.add(binascii.unhexlify(parts[1]))
        elif parts[0] == b"o" and len(parts) == 4:
            resume[binascii.unhexlify(parts[3])] = (int(parts[1]), parts[2].decode("ascii"))
    return skip, resume
def main():
    big_pipe(OUT)
    mode, _, token = sys.argv[2].partition(":")
    skip, resume = set(), {}
    if mode == "resume":
        stop_others(token)
        skip, resume = read_spec()
    put(2, b"#trainjob-python\n")
    packer = Packer(skip, resume)
    packer.pack(os.fsencode(sys.argv[1]))
    emit(bytes(1024))
    packer.flush()
    return packer.rc
try:
    sys.exit(main())
except OSError as exc:  # stdout gone: the client stopped reading
    sys.stderr.write("tar: " + str(exc) + "\n")
    sys.exit(2)
"""
)


def untar_code(stale: float) -> str:
    """:data:`UNTAR_PY` sweeping what no process holds and nothing changed in for ``stale``
    seconds (negative: no sweep)."""
    return UNTAR_PY.replace("@STALE@", repr(float(stale)))
