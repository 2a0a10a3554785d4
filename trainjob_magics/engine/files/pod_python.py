"""The pod-side Python of a verified transfer (run with ``python3 -I -S -c``, standard library
only, Python 3.4+: no f-strings): each file is hashed as it passes, in the one process that
unpacks or packs the tar stream, so there is no second read and no second pass. No tarfile,
json or base64 (with ``re``, their imports would double the start-up time): the ustar/PAX
headers are read and written here.

``UNTAR_PY NAME`` (upload, in the destination's parent): reads the tar stream from stdin,
writes its members like ``tar xf -`` (existing files replaced, directories merged, modes and
mtimes kept) and prints ``#trainjob-python`` then one JSON line per regular file
(``{"path", "sha256"}``) to stdout. ``PACK_PY NAME`` (download, in the source's parent): writes
``NAME`` as a tar stream (ustar, PAX records where needed; links kept as links, hard links once)
to stdout like ``tar cf - -- NAME``, then the same listing to stderr. Both continue past a file
they cannot read or write (a one-line message on stderr) and exit 2 at the end, as GNU tar does.
"""

from __future__ import annotations

_COMMON = r"""
import hashlib, os, stat, sys
BIG = 1 << 20
ZERO = bytes(512)
def big_pipe(fd):
    try:
        import fcntl
        fcntl.fcntl(fd, 1031, BIG)  # F_SETPIPE_SZ: fewer, larger pipe reads/writes
    except Exception:
        pass
SPARE = memoryview(bytearray(BIG))  # every data read goes here: no fresh memory per read
def text(raw):  # paths are bytes here (whatever the locale); names in listings are UTF-8
    return raw.decode("utf-8", "surrogateescape")
def say(path, msg):
    sys.stderr.write("tar: " + text(path) + ": " + msg + "\n")
def why(exc):
    return exc.strerror or str(exc)
def jstr(s):
    out = []
    for ch in s:
        o = ord(ch)
        if ch == '"' or ch == "\\":
            out.append("\\" + ch)
        elif 0x20 <= o < 0x7f:
            out.append(ch)
        elif o < 0x10000:
            out.append("\\u%04x" % o)
        else:
            o -= 0x10000
            out.append("\\u%04x\\u%04x" % (0xd800 + (o >> 10), 0xdc00 + (o & 0x3ff)))
    return '"' + "".join(out) + '"'
def row(path, sha):
    return '{"path": ' + jstr(text(path)) + ', "sha256": "' + sha.hexdigest() + '"}\n'
"""

UNTAR_PY = (
    _COMMON
    + r"""
class TarError(Exception):
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
            raise TarError("unexpected end of the tar stream")
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
                    raise TarError("unexpected end of the tar stream")
                piece = SPARE[:got]
            self.off += len(piece)
            n -= len(piece)
            yield piece
def field(raw):
    return raw.split(b"\0", 1)[0]
def number(raw):
    if raw[0] & 0x80:  # base-256
        n = int.from_bytes(raw[1:], "big")
        return n - (1 << (8 * len(raw) - 8)) if raw[0] & 0x40 else n
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
def members(src):
    pax, longs = {}, {}
    while True:
        block = src.exact(512)
        if block == ZERO:
            return
        if sum(block[:148]) + 256 + sum(block[156:]) != number(block[148:156]):
            raise TarError("bad header checksum at byte %d" % (src.off - 512))
        kind, size = block[156:157], number(block[124:136])
        if kind in (b"x", b"g", b"L", b"K"):
            data = src.exact(-(-size // 512) * 512)[:size]
            if kind == b"x":
                pax = pax_records(data)
            elif kind != b"g":
                longs[kind] = field(data)
            continue
        m = Member()
        name = field(block[:100])
        if block[257:263] == b"ustar\0" and field(block[345:500]):
            name = field(block[345:500]) + b"/" + name
        m.name = pax.get(b"path", longs.get(b"L", name))
        m.linkname = pax.get(b"linkpath", longs.get(b"K", field(block[157:257])))
        m.size = int(pax[b"size"]) if b"size" in pax else size
        m.mtime = int(float(pax[b"mtime"])) if b"mtime" in pax else number(block[136:148])
        m.mode = number(block[100:108]) & 0o7777
        m.kind = b"0" if kind in (b"\0", b"7") else kind
        m.offset_data = src.off
        pax, longs = {}, {}
        yield m
        src.skip(m.offset_data + -(-m.size // 512) * 512)
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
def unpack_file(src, m, name, keep):
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    try:
        parent(name)
        try:
            fd = os.open(name, flags | os.O_EXCL, 0o600)  # new: nothing to replace
        except FileExistsError:
            replace(name)
            fd = os.open(name, flags, 0o600)
    except OSError as exc:
        say(name, why(exc))
        return None
    sha, failed = hashlib.sha256(), None
    try:
        for piece in src.data(m.size):
            sha.update(piece)
            view = piece
            while view and failed is None:
                try:
                    view = view[os.write(fd, view):]
                except OSError as exc:
                    failed = exc
        if failed is None:
            try:
                os.fchmod(fd, m.mode & ~keep)
                os.utime(fd, (m.mtime, m.mtime))
            except OSError as exc:
                failed = exc
    finally:
        os.close(fd)
    if failed is not None:
        say(name, why(failed))
        return None
    return row(name, sha)
def main():
    big_pipe(0)
    top = os.fsencode(sys.argv[1])
    umask = os.umask(0)
    os.umask(umask)
    keep = 0 if os.geteuid() == 0 else umask
    src = Stdin()
    rc, rows, dirs = 0, [], []
    for m in members(src):
        name = m.name.rstrip(b"/") or m.name
        if name.startswith(b"./"):
            name = name[2:]
        if name != top and not name.startswith(top + b"/") or b".." in name.split(b"/"):
            raise TarError("member outside " + text(top) + ": " + text(name))
        if m.kind == b"0":
            line = unpack_file(src, m, name, keep)
            if line is None:
                rc = 2
            else:
                rows.append(line)
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
            say(name, why(exc))
            rc = 2
    for name, m in reversed(dirs):
        try:
            os.chmod(name, m.mode & ~keep)
            os.utime(name, (m.mtime, m.mtime))
        except OSError:
            pass
    sys.stdout.write("#trainjob-python\n" + "".join(rows))
    return rc
try:
    sys.exit(main())
except (OSError, TarError, ValueError) as exc:
    sys.stderr.write("tar: the tar stream could not be unpacked: " + str(exc) + "\n")
    sys.exit(2)
"""
)

PACK_PY = (
    _COMMON
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
def header(path, st, kind, linkname=b"", size=0):
    name = path + (b"/" if kind == b"5" else b"")
    numbers = [(b"uid", st.st_uid, 8), (b"gid", st.st_gid, 8), (b"size", size, 12),
               (b"mtime", int(st.st_mtime), 12)]
    records = b"".join(pax_record(k, str(v).encode("ascii"))
                       for k, v, width in numbers if not 0 <= v < 8 ** (width - 1))
    if len(name) > 100:
        records += pax_record(b"path", name)
    if len(linkname) > 100:
        records += pax_record(b"linkpath", linkname)
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
    def __init__(self):
        self.rc, self.rows, self.links = 0, [], {}
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
        try:
            size = left = st.st_size
            header(path, st, b"0", size=size)
            sha = hashlib.sha256()
            while left:
                got = os.readv(fd, [SPARE[:min(left, BIG)]])
                if not got:
                    say(path, "file shrank while it was read; padded with zeros")
                    self.rc = 1
                    SPARE[:min(left, BIG)] = bytes(min(left, BIG))
                    got = min(left, BIG)
                sha.update(SPARE[:got])
                emit(SPARE[:got])
                left -= got
            emit(bytes(-size % 512))
            if os.fstat(fd).st_size != size:
                say(path, "file changed as we read it")
                self.rc = max(self.rc, 1)
        finally:
            os.close(fd)
        self.rows.append(row(path, sha))
        return True
    def fail(self, path, exc):
        say(path, why(exc))
        self.rc = 2
def main():
    big_pipe(OUT)
    packer = Packer()
    packer.pack(os.fsencode(sys.argv[1]))
    emit(bytes(1024))
    sys.stderr.write("#trainjob-python\n" + "".join(packer.rows))
    return packer.rc
try:
    sys.exit(main())
except OSError as exc:  # stdout gone: the client stopped reading
    sys.stderr.write("tar: " + str(exc) + "\n")
    sys.exit(2)
"""
)
