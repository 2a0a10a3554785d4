/** Each GPU's utilisation and memory in a job's pods: asked of the server only while a panel
 * (or the sidebar) showing the job is visible and the job runs with GPUs, at most every 10 s
 * per job whatever asks (the server execs in each pod at most that often, and never where a
 * command runs). */
import { ISignal, Signal } from '@lumino/signaling';

import { fetchGpus } from './api';
import { IGpu, IGpuReport, IPodGpus, ISession } from './types';

export const GPU_EVERY_MS = 10000;
/** A report older than this is not shown (nobody asked for a while: the panel was hidden). */
export const GPU_SHOWN_MS = 30000;

function amount(value: number | null): string {
  return value === null ? 'n/a' : String(value);
}

/** "GPU 0 · 37 % · 1234/81920 MiB". */
export function gpuLine(g: IGpu): string {
  const util = g.utilization === null ? 'util n/a' : `${g.utilization} %`;
  const memory = `${amount(g.memoryUsedMiB)}/${amount(g.memoryTotalMiB)} MiB`;
  return `GPU ${g.index ?? '?'} · ${util} · ${memory}`;
}

/** One line per pod with readings or not sampled; pods without nvidia-smi say nothing. */
export function podGpuLines(report: IGpuReport | null): string[] {
  const lines: string[] = [];
  for (const p of report?.pods ?? []) {
    if (p.state === 'ok') {
      lines.push(`${p.pod}: ${p.gpus.map(gpuLine).join(', ')}`);
    } else if (p.state === 'busy') {
      lines.push(`${p.pod}: not sampled while a command runs`);
    }
  }
  return lines;
}

/** The sidebar's one line: "2 GPUs · 37 % avg · 1746/163840 MiB", or '' with no readings. */
export function gpuSummary(report: IGpuReport | null): string {
  const pods: IPodGpus[] = report?.pods ?? [];
  const gpus = pods.filter(p => p.state === 'ok').flatMap(p => p.gpus);
  if (!gpus.length) {
    return pods.some(p => p.state === 'busy') ? 'GPUs not sampled while a command runs' : '';
  }
  const utils = gpus.map(g => g.utilization).filter((u): u is number => u !== null);
  const used = gpus.reduce((n, g) => n + (g.memoryUsedMiB ?? 0), 0);
  const total = gpus.reduce((n, g) => n + (g.memoryTotalMiB ?? 0), 0);
  const avg = utils.length
    ? `${Math.round(utils.reduce((a, b) => a + b, 0) / utils.length)} % avg`
    : 'util n/a';
  return `${gpus.length} GPU${gpus.length === 1 ? '' : 's'} · ${avg} · ${used}/${total} MiB`;
}

/** Whether a panel of this kind, for this job, should ask for GPUs now. */
export function wantsGpus(kind: string, job: ISession | null, visible: boolean): boolean {
  if (!visible || !job || job.gone || job.state !== 'Running') {
    return false;
  }
  return kind !== 'cell' && kind !== 'forward' && (job.holds?.gpu ?? 0) > 0;
}

export function gpuKey(namespace: string, name: string, uid: string): string {
  return `${namespace}/${name}/${uid}`;
}

type Fetch = (namespace: string, name: string, uid: string) => Promise<IGpuReport>;

/** The page's GPU reports: one request per job at most every ``everyMs``, shared by every
 * panel and the sidebar. */
export class GpuReports {
  private _reports = new Map<string, { at: number; report: IGpuReport }>();
  private _asked = new Map<string, number>();
  private _changed = new Signal<this, string>(this);

  constructor(
    private _fetch: Fetch = fetchGpus,
    private _now: () => number = (): number => Date.now(),
    readonly everyMs: number = GPU_EVERY_MS
  ) {}

  get changed(): ISignal<this, string> {
    return this._changed;
  }

  /** The newest report of the job, when read within ``maxAgeMs``. */
  latest(
    namespace: string,
    name: string,
    uid: string,
    maxAgeMs = GPU_SHOWN_MS
  ): IGpuReport | null {
    const kept = this._reports.get(gpuKey(namespace, name, uid));
    return kept && this._now() - kept.at <= maxAgeMs ? kept.report : null;
  }

  /** Ask the server for the job's GPUs, unless asked within ``everyMs`` (or being asked). */
  ask(namespace: string, name: string, uid: string): void {
    const key = gpuKey(namespace, name, uid);
    const last = this._asked.get(key);
    const now = this._now();
    if (last !== undefined && now - last < this.everyMs) {
      return;
    }
    this._asked.set(key, now);
    this._fetch(namespace, name, uid)
      .then(report => {
        this._reports.set(key, { at: this._now(), report });
        this._changed.emit(key);
      })
      .catch(() => {
        // the panel keeps its last reading; the next ask (10 s on) tries again
      });
  }
}

let shared: GpuReports | null = null;

export function sharedGpuReports(): GpuReports {
  if (!shared) {
    shared = new GpuReports();
  }
  return shared;
}

/** The GPU lines under a panel's live line (empty, and hidden, without readings). */
export function renderGpus(node: HTMLElement, report: IGpuReport | null): void {
  const lines = podGpuLines(report);
  node.replaceChildren(
    ...lines.map(text => {
      const div = document.createElement('div');
      div.className = 'tjm-gpu-line';
      div.textContent = text;
      return div;
    })
  );
  node.hidden = lines.length === 0;
  const at = report?.pods.find(p => p.sampledAt)?.sampledAt;
  node.title = at ? `nvidia-smi, sampled ${new Date(at).toLocaleTimeString()}` : '';
}
