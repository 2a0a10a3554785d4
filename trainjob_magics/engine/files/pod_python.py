"""The pod-side Python of a verified transfer (run with ``python3 -I -S -c``, standard library
only, Python 3.4+: no f-strings): each file is hashed as it passes, in the one process that
unpacks or packs the tar stream, so there is no second read and no second pass.

``UNTAR_PY NAME`` (upload, in the destination's parent): reads the tar stream from stdin,
writes its members like ``tar xf -`` (existing files replaced, directories merged, modes and
mtimes kept) and prints ``#trainjob-python`` then one JSON line per regular file
(``{"path", "sha256"}``) to stdout. ``PACK_PY NAME`` (download, in the source's parent): writes
``NAME`` as a tar stream (PAX; links kept as links, hard links once) to stdout like
``tar cf - -- NAME``, then the same listing to stderr. Both continue past a file they cannot
read or write (a one-line message on stderr) and exit 2 at the end, as GNU tar does.
"""

from __future__ import annotations

# The tar stream's reader: exact reads for tarfile's headers (tell/seek forward, as tarfile's
# "r:" mode wants), the data straight from the pipe in large reads.
_READER = r"""
import hashlib, json, os, stat, sys, tarfile
BIG = 1 << 20
def big_pipe(fd):
    try:
        import fcntl
        fcntl.fcntl(fd, 1031, BIG)  # F_SETPIPE_SZ: fewer, larger pipe reads/writes
    except Exception:
        pass
SPARE = memoryview(bytearray(BIG))  # every data read goes here: no fresh memory per read
def say(msg):
    sys.stderr.write("tar: " + msg + "\n")
"""

UNTAR_PY = (
    _READER
    + r"""
class Stdin:
    def __init__(self):
        self.buf, self.pos, self.off = b"", 0, 0
    def tell(self):
        return self.off
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
    def seek(self, where, whence=0):
        while self.off < where and self.read(min(where - self.off, BIG)):
            pass
        if self.off != where:
            raise OSError("cannot seek back in the tar stream")
        return self.off
    def data(self, n):
        while n > 0:
            have = len(self.buf) - self.pos
            if have:
                piece = memoryview(self.buf)[self.pos:self.pos + n]
                self.pos += len(piece)
            else:
                got = os.readv(0, [SPARE[:min(n, BIG)]])
                if not got:
                    raise OSError("unexpected end of the tar stream")
                piece = SPARE[:got]
            self.off += len(piece)
            n -= len(piece)
            yield piece
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
    end = m.offset_data + -(-m.size // 512) * 512
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    try:
        parent(name)
        try:
            fd = os.open(name, flags | os.O_EXCL, 0o600)  # new: nothing to replace
        except FileExistsError:
            replace(name)
            fd = os.open(name, flags, 0o600)
    except OSError as exc:
        say(name + ": " + (exc.strerror or str(exc)))
        src.seek(end)
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
    src.seek(end)
    if failed is not None:
        say(name + ": " + (failed.strerror or str(failed)))
        return None
    return json.dumps({"path": name, "sha256": sha.hexdigest()})
def main():
    big_pipe(0)
    top = sys.argv[1]
    umask = os.umask(0)
    os.umask(umask)
    keep = 0 if os.geteuid() == 0 else umask
    src = Stdin()
    rc, rows, dirs = 0, [], []
    with tarfile.open(fileobj=src, mode="r:") as tar:
        for m in tar:
            name = m.name.rstrip("/") or m.name
            if name.startswith("./"):
                name = name[2:]
            if name != top and not name.startswith(top + "/"):
                raise OSError("member outside " + top + ": " + name)
            if m.isreg():
                row = unpack_file(src, m, name, keep)
                if row is None:
                    rc = 2
                else:
                    rows.append(row)
                continue
            try:
                if m.isdir():
                    if not os.path.isdir(name):
                        replace(name)
                        os.makedirs(name)
                    MADE.add(name)
                    dirs.append(m)
                elif m.issym() or m.islnk():
                    parent(name)
                    replace(name)
                    if m.issym():
                        os.symlink(m.linkname, name)
                    else:
                        os.link(m.linkname.rstrip("/"), name)
            except OSError as exc:
                say(name + ": " + (exc.strerror or str(exc)))
                rc = 2
    for m in reversed(dirs):
        try:
            os.chmod(m.name.rstrip("/"), m.mode & ~keep)
            os.utime(m.name.rstrip("/"), (m.mtime, m.mtime))
        except OSError:
            pass
    sys.stdout.write("#trainjob-python\n" + "".join(r + "\n" for r in rows))
    return rc
try:
    sys.exit(main())
except (OSError, tarfile.TarError) as exc:
    say("the tar stream could not be unpacked: " + str(exc))
    sys.exit(2)
"""
)

PACK_PY = (
    _READER
    + r"""
OUT = 1
def emit(data):
    view = memoryview(data)
    while view:
        view = view[os.write(OUT, view):]
def header(info):
    emit(info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape"))
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
            todo.extend(path + "/" + name for name in reversed(names))
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
        info = tarfile.TarInfo(path)
        info.mode, info.mtime = stat.S_IMODE(mode), int(st.st_mtime)
        info.uid, info.gid = st.st_uid, st.st_gid
        if stat.S_ISREG(mode):
            key = (st.st_dev, st.st_ino)
            if st.st_nlink > 1 and key in self.links:
                info.type, info.linkname = tarfile.LNKTYPE, self.links[key]
                return header(info)
            if self.file(path, info, st) and st.st_nlink > 1:
                self.links[key] = path
        elif stat.S_ISDIR(mode):
            info.type = tarfile.DIRTYPE
            header(info)
        elif stat.S_ISLNK(mode):
            try:
                info.type, info.linkname = tarfile.SYMTYPE, os.readlink(path)
            except OSError as exc:
                return self.fail(path, exc)
            header(info)
        elif stat.S_ISSOCK(mode):
            say(path + ": socket ignored")
        else:
            info.type = tarfile.FIFOTYPE if stat.S_ISFIFO(mode) else (
                tarfile.CHRTYPE if stat.S_ISCHR(mode) else tarfile.BLKTYPE)
            if not stat.S_ISFIFO(mode):
                info.devmajor, info.devminor = os.major(st.st_rdev), os.minor(st.st_rdev)
            header(info)
    def file(self, path, info, st):
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        except OSError as exc:
            return self.fail(path, exc)
        try:
            info.size = left = st.st_size
            header(info)
            sha = hashlib.sha256()
            while left:
                got = os.readv(fd, [SPARE[:min(left, BIG)]])
                if not got:
                    say(path + ": file shrank while it was read; padded with zeros")
                    self.rc = 1
                    SPARE[:min(left, BIG)] = bytes(min(left, BIG))
                    got = min(left, BIG)
                sha.update(SPARE[:got])
                emit(SPARE[:got])
                left -= got
            emit(bytes(-info.size % 512))
            if os.fstat(fd).st_size != info.size:
                say(path + ": file changed as we read it")
                self.rc = max(self.rc, 1)
        finally:
            os.close(fd)
        self.rows.append(json.dumps({"path": path, "sha256": sha.hexdigest()}))
        return True
    def fail(self, path, exc):
        say(path + ": " + (exc.strerror or str(exc)))
        self.rc = 2
def main():
    big_pipe(OUT)
    packer = Packer()
    packer.pack(sys.argv[1])
    emit(bytes(1024))
    sys.stderr.write("#trainjob-python\n" + "".join(r + "\n" for r in packer.rows))
    return packer.rc
try:
    sys.exit(main())
except OSError as exc:  # stdout gone: the client stopped reading
    say(str(exc))
    sys.exit(2)
"""
)
