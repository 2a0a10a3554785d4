/** Pure wording shared by the sidebar, the status bar and the live panels (unit-tested). */
import { IForwardRow, ISession } from './types';

export function durationWords(seconds: number): string {
  const s = Math.max(0, Math.floor(seconds));
  if (s < 60) {
    return `${s} s`;
  }
  const minutes = Math.floor(s / 60);
  if (minutes < 60) {
    return `${minutes} min`;
  }
  const hours = Math.floor(minutes / 60);
  const rest = minutes % 60;
  if (hours < 24) {
    return rest ? `${hours} h ${rest} min` : `${hours} h`;
  }
  const days = Math.floor(hours / 24);
  return hours % 24 ? `${days} d ${hours % 24} h` : `${days} d`;
}

/** "Running · 4/4 pods ready" / "Queued · position 2 in team-a" / "Gone: closed by ...". */
export function stateLine(s: ISession): string {
  if (s.gone) {
    const at = s.gone.at ? ` at ${new Date(s.gone.at).toLocaleTimeString()}` : '';
    return `Gone: ${s.gone.reason}${at}`;
  }
  if (s.state === 'Unknown') {
    return `Unknown: ${s.problem ?? 'not read yet'}`;
  }
  const parts = [s.state];
  if (s.closing) {
    parts[0] = `Closing (${s.closing})`;
  }
  if (s.pods.length) {
    parts.push(`${s.podsReady} pods ready`);
  }
  const q = s.queue;
  if (q && q.position !== undefined && q.position !== null) {
    parts.push(`position ${q.position + 1} in ${q.localQueue}`);
  } else if (q && q.state && q.state !== 'Admitted') {
    parts.push(`${q.state} in ${q.localQueue}`);
  }
  return parts.join(' · ');
}

/** Seconds since the page read ``s`` (0 when unknown). */
function sinceRead(s: ISession, now: number): number {
  return s.readAt === undefined ? 0 : Math.max(0, now - s.readAt) / 1000;
}

/** What the job holds, its idle time counted on from when the record was read, so the idle
 * time and the idle-stop countdown below it move together ("idle 20 s" is 20 s before an idle
 * stop of 40 s, never 3 s). '' when it holds nothing known. */
export function holdsText(s: ISession, now: number = Date.now()): string {
  const h = s.holds;
  if (!h) {
    return '';
  }
  if (h.idleSeconds === null || h.idleSeconds === undefined || h.heldText === undefined) {
    return h.text;
  }
  return `${h.heldText} · idle ${durationWords(h.idleSeconds + sinceRead(s, now))}`;
}

export const IDLE_WARNING_SECONDS = 300; // as the server extension (inventory/records.py)

/** The idle-stop warning, or '' when none is due within 5 minutes; counted down from when the
 * record was read (``readAt``), so a panel between two reads does not stand still. */
export function idleWarning(s: ISession, now: number = Date.now()): string {
  if (s.idleStopIn === null || s.idleStopIn === undefined) {
    return '';
  }
  const left = s.idleStopIn - sinceRead(s, now);
  if (!s.idleWarning && left > IDLE_WARNING_SECONDS) {
    return '';
  }
  return `Idle stop in ${durationWords(left)}: run a command to keep it`;
}

export interface ITotals {
  count: number;
  gpu: number;
  cpu: number;
  gpuHours: number;
}

export function totals(sessions: ISession[]): ITotals {
  const t: ITotals = { count: 0, gpu: 0, cpu: 0, gpuHours: 0 };
  for (const s of sessions) {
    if (s.gone) {
      continue;
    }
    t.count += 1;
    t.gpu += s.holds?.gpu ?? 0;
    t.cpu += s.holds?.cpu ?? 0;
    t.gpuHours += s.holds?.gpuHours ?? 0;
  }
  return t;
}

function num(value: number): string {
  return Number.isInteger(value) ? String(value) : value.toFixed(1);
}

/** The status bar's words: "2 TrainJobs · 8 GPU · 32 CPU". */
export function totalsLine(t: ITotals): string {
  const parts = [`${t.count} TrainJob${t.count === 1 ? '' : 's'}`];
  if (t.gpu) {
    parts.push(`${num(t.gpu)} GPU`);
  }
  if (t.cpu) {
    parts.push(`${num(t.cpu)} CPU`);
  }
  return parts.join(' · ');
}

/** Sessions grouped by notebook (or kernel id, or "no kernel" for orphans), in first-seen order. */
export function groupByKernel(sessions: ISession[]): Array<[string, ISession[]]> {
  const groups = new Map<string, ISession[]>();
  for (const s of sessions) {
    let key = 'no kernel';
    if (s.kernelAlive && s.notebook) {
      key = s.notebook;
    } else if (s.kernelAlive && s.kernel) {
      key = `kernel ${s.kernel.slice(0, 8)}`;
    }
    const list = groups.get(key) ?? [];
    list.push(s);
    groups.set(key, list);
  }
  return Array.from(groups.entries());
}

export function attachCommand(s: ISession): string {
  return `%trainjob_connect --attach ${s.name} --namespace ${s.namespace}`;
}

/** What closing ``s`` releases, for the close dialog: "2 GPU and 8 CPU", else "its pods". */
export function releaseWords(s: ISession): string {
  const parts = [];
  if (s.holds?.gpu) {
    parts.push(`${num(s.holds.gpu)} GPU`);
  }
  if (s.holds?.cpu) {
    parts.push(`${num(s.holds.cpu)} CPU`);
  }
  return parts.length ? parts.join(' and ') : 'its pods';
}

/** A forward's words in the sidebar: "port 6006 of pod P → local port 40123". */
export function forwardWords(f: IForwardRow): string {
  return `port ${f.port}${f.pod ? ` of pod ${f.pod}` : ''} → local port ${f.localPort}`;
}
