/** What the server extension answers. Typed once, in Python: each interface here mirrors a
 * TypedDict of trainjob_magics/engine/inventory/schema.py (its ``TYPESCRIPT`` map), and
 * tests/unit/test_rest_types.py fails when a field, its optionality or its type differ. */

export interface IHolds {
  gpu: number;
  cpu: number;
  memoryBytes: number;
  heldSeconds: number;
  gpuHours: number;
  cpuHours: number;
  idleSeconds: number | null;
  text: string;
  /** ``text`` without its idle part (the page counts the idle time on from ``readAt``). */
  heldText: string;
}

export interface IQueue {
  localQueue: string;
  state?: string;
  position?: number | null;
  clusterQueuePosition?: number | null;
  message?: string;
}

export interface IPodRow {
  name: string;
  phase: string;
  ready: boolean;
}

/** An open port forward of the session's kernel (``forwards``, records.py ``forwards_of``). */
export interface IForwardRow {
  localPort: number;
  port: number;
  pod: string;
  /** The link as the kernel shows it (its local URL, or the server's proxy path). */
  link: string;
}

export interface IGone {
  reason: string;
  at: string | null;
}

/** A job's record: live (every field), gone (``gone`` set) or not readable (``problem``), from
 * the sessions GET (``notebook``, ``kernelAlive`` added) or the one-job GET (``version``). */
export interface ISession {
  name: string;
  namespace: string;
  uid: string;
  state: string;
  runtime?: string;
  kernel?: string;
  /** The kernel's host, and the user who created the job (the created-by note). */
  host?: string;
  user?: string;
  notebook?: string;
  kernelAlive?: boolean;
  created?: string | null;
  ageSeconds?: number | null;
  lastCommand?: string | null;
  /** Seconds without the kernel's heartbeat before the job ends itself; null when off. */
  idleTimeout?: number | null;
  idleStopSeconds?: number | null;
  idleStopIn?: number | null;
  idleWarning?: boolean;
  closing?: string;
  forwards?: IForwardRow[];
  pods: IPodRow[];
  podsReady: string;
  queue?: IQueue | null;
  holds: IHolds | null;
  gone: IGone | null;
  problem?: string;
  /** The snapshot version the one-job GET read it at. */
  version?: number;
  /** When this page read the record (Date.now()); set by the page, not the server. */
  readAt?: number;
}

/** One GPU as nvidia-smi reports it; null where it said [N/A] or [Not Supported]. */
export interface IGpu {
  index: number | null;
  name: string;
  utilization: number | null;
  memoryUsedMiB: number | null;
  memoryTotalMiB: number | null;
}

/** One pod's GPU sample: ok (gpus read), busy (a command runs: not sampled), absent (no
 * nvidia-smi), no-gpu, error (message). */
export interface IPodGpus {
  pod: string;
  state: string;
  gpus: IGpu[];
  sampledAt: string | null;
  message: string;
}

/** ``GET .../sessions/NS/NAME/gpus`` (engine/inventory/service.py ``gpus``). */
export interface IGpuReport {
  name: string;
  namespace: string;
  uid: string;
  sampleEvery: number;
  pods: IPodGpus[];
  problem?: string;
}

export interface ISnapshot {
  version: number;
  sessions: ISession[];
  gone: ISession[];
  problems: string[];
  namespaces: string[];
  user: string | null;
}

/** ``POST .../close``'s answer, and every error's body. */
export interface IMessage {
  message: string;
}

/** What a panel carries in its MIME bundle (magics/views/live.py). */
export interface IPanelRef {
  kind: string;
  name: string;
  namespace: string;
  uid?: string;
  alias?: string;
  port?: number;
  link?: string;
  pod?: string;
  /** A forward panel: the kernel drew it forwarding (only the kernel could end that drawing). */
  forwarding?: boolean;
}

export const PANEL_MIME = 'application/vnd.trainjob-magics.panel+json';
