import {
  GPU_EVERY_MS,
  GpuReports,
  gpuLine,
  gpuSummary,
  podGpuLines,
  renderGpus,
  wantsGpus
} from '../src/gpus';
import { IGpu, IGpuReport, IPodGpus, ISession } from '../src/types';

const GPU0: IGpu = {
  index: 0,
  name: 'Stand-in GPU (not NVIDIA)',
  utilization: 37,
  memoryUsedMiB: 1234,
  memoryTotalMiB: 81920
};
const GPU1: IGpu = { ...GPU0, index: 1, utilization: null, memoryUsedMiB: 512 };
const OK: IPodGpus = {
  pod: 'j-node-0-0',
  state: 'ok',
  gpus: [GPU0, GPU1],
  sampledAt: '2026-12-07T14:03:12+00:00',
  message: ''
};
const BUSY: IPodGpus = {
  pod: 'j-node-0-1',
  state: 'busy',
  gpus: [],
  sampledAt: null,
  message: 'a command runs'
};
const ABSENT: IPodGpus = {
  pod: 'j-node-0-2',
  state: 'absent',
  gpus: [],
  sampledAt: null,
  message: 'no nvidia-smi'
};

/** What the server answered for the stand-in nvidia-smi (tests/helpers/standin_nvidia_smi). */
function report(over: Partial<IGpuReport> = {}): IGpuReport {
  return { name: 'j', namespace: 'ns', uid: 'u', sampleEvery: 10, pods: [OK, BUSY, ABSENT], ...over };
}

function job(over: Partial<ISession> = {}): ISession {
  return {
    name: 'j',
    namespace: 'ns',
    uid: 'u',
    state: 'Running',
    pods: [],
    podsReady: '3/3',
    holds: {
      gpu: 3,
      cpu: 12,
      memoryBytes: 0,
      heldSeconds: 60,
      gpuHours: 0.05,
      cpuHours: 0.2,
      idleSeconds: 10,
      text: '3 GPU · 12 CPU',
      heldText: '3 GPU · 12 CPU'
    },
    gone: null,
    ...over
  };
}

describe('GPU wording', () => {
  it('says util % and used/total MiB per GPU, n/a where nvidia-smi had none', () => {
    expect(gpuLine(GPU0)).toBe('GPU 0 · 37 % · 1234/81920 MiB');
    expect(gpuLine(GPU1)).toBe('GPU 1 · util n/a · 512/81920 MiB');
  });

  it('gives a line per pod with readings or not sampled, none for pods without nvidia-smi', () => {
    expect(podGpuLines(report())).toEqual([
      'j-node-0-0: GPU 0 · 37 % · 1234/81920 MiB, GPU 1 · util n/a · 512/81920 MiB',
      'j-node-0-1: not sampled while a command runs'
    ]);
    expect(podGpuLines(null)).toEqual([]);
  });

  it('sums up for the sidebar', () => {
    expect(gpuSummary(report())).toBe('2 GPUs · 37 % avg · 1746/163840 MiB');
    const busy = report({ pods: [BUSY] });
    expect(gpuSummary(busy)).toBe('GPUs not sampled while a command runs');
    expect(gpuSummary(report({ pods: [ABSENT] }))).toBe('');
  });

  it('renders the lines under the live line, hidden without readings', () => {
    const node = document.createElement('div');
    renderGpus(node, report());
    expect(node.hidden).toBe(false);
    expect(Array.from(node.querySelectorAll('.tjm-gpu-line')).map(n => n.textContent)).toEqual(
      podGpuLines(report())
    );
    renderGpus(node, null);
    expect(node.hidden).toBe(true);
    expect(node.children.length).toBe(0);
  });
});

describe('when GPUs are asked for', () => {
  it('only for a visible panel of a running job that holds GPUs', () => {
    expect(wantsGpus('status', job(), true)).toBe(true);
    expect(wantsGpus('connect', job(), true)).toBe(true);
    expect(wantsGpus('status', job(), false)).toBe(false);
    expect(wantsGpus('status', null, true)).toBe(false);
    expect(wantsGpus('status', job({ state: 'Suspended' }), true)).toBe(false);
    expect(wantsGpus('status', job({ gone: { reason: 'deleted', at: null } }), true)).toBe(false);
    const noGpu = job({ holds: { ...job().holds!, gpu: 0 } });
    expect(wantsGpus('status', noGpu, true)).toBe(false);
    expect(wantsGpus('cell', job(), true)).toBe(false);
    expect(wantsGpus('forward', job(), true)).toBe(false);
  });

  it('asks the server at most every 10 s per job, whatever asks', async () => {
    let now = 0;
    const fetch = jest.fn((): Promise<IGpuReport> => Promise.resolve(report()));
    const reports = new GpuReports(fetch, () => now);
    const changed = jest.fn();
    reports.changed.connect(changed);
    for (let i = 0; i < 5; i++) {
      reports.ask('ns', 'j', 'u'); // five panels of the job, or five updates of one
    }
    expect(fetch).toHaveBeenCalledTimes(1);
    await Promise.resolve();
    await Promise.resolve();
    expect(changed).toHaveBeenCalledTimes(1);
    expect(reports.latest('ns', 'j', 'u')).toEqual(report());
    now = GPU_EVERY_MS - 1;
    reports.ask('ns', 'j', 'u');
    expect(fetch).toHaveBeenCalledTimes(1);
    reports.ask('ns', 'other', 'u2'); // another job is asked apart
    expect(fetch).toHaveBeenCalledTimes(2);
    now = GPU_EVERY_MS;
    reports.ask('ns', 'j', 'u');
    expect(fetch).toHaveBeenCalledTimes(3);
    expect(fetch).toHaveBeenLastCalledWith('ns', 'j', 'u');
  });

  it('shows nothing once the last reading is old (nobody looked for a while)', async () => {
    let now = 0;
    const reports = new GpuReports(() => Promise.resolve(report()), () => now);
    reports.ask('ns', 'j', 'u');
    await Promise.resolve();
    await Promise.resolve();
    now = 29000;
    expect(reports.latest('ns', 'j', 'u')).not.toBeNull();
    now = 31000;
    expect(reports.latest('ns', 'j', 'u')).toBeNull();
  });

  it('keeps the last reading when a request fails, and asks again 10 s on', async () => {
    let now = 0;
    const fetch = jest
      .fn((): Promise<IGpuReport> => Promise.resolve(report()))
      .mockImplementationOnce(() => Promise.reject(new Error('503')));
    const reports = new GpuReports(fetch, () => now);
    reports.ask('ns', 'j', 'u');
    await Promise.resolve();
    await Promise.resolve();
    expect(reports.latest('ns', 'j', 'u')).toBeNull();
    now = GPU_EVERY_MS;
    reports.ask('ns', 'j', 'u');
    await Promise.resolve();
    await Promise.resolve();
    expect(fetch).toHaveBeenCalledTimes(2);
    expect(reports.latest('ns', 'j', 'u')?.pods[0]?.state).toBe('ok');
  });
});
