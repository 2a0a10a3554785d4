import { renderLive, showsHolds } from '../src/panel';
import { ISession } from '../src/types';

describe('the live line of a panel', () => {
  it('marks the state and shows the idle warning', () => {
    const node = document.createElement('div');
    const job: ISession = {
      name: 'j',
      namespace: 'ns',
      uid: 'u',
      state: 'Running',
      pods: [],
      podsReady: '0/0',
      holds: null,
      gone: null,
      idleWarning: true,
      idleStopIn: 120
    };
    renderLive(node, { kind: 'status', name: 'j', namespace: 'ns' }, job);
    expect(node.dataset.state).toBe('Running');
    expect(node.querySelector('.tjm-idle-warning')?.textContent).toContain('Idle stop in 2 min');
    renderLive(node, { kind: 'status', name: 'j', namespace: 'ns' }, null);
    expect(node.dataset.state).toBe('Reading');
    expect(node.textContent).toBe('TrainJob j: reading its state…');
  });
});

describe('the holding line', () => {
  const job: ISession = {
    name: 'j',
    namespace: 'ns',
    uid: 'u',
    state: 'Running',
    pods: [],
    podsReady: '2/2',
    holds: {
      gpu: 0,
      cpu: 2,
      memoryBytes: 0,
      heldSeconds: 7,
      gpuHours: 0,
      cpuHours: 0.004,
      idleSeconds: 3,
      text: '2 CPU · held 7 s (<0.1 CPU-h) · idle 3 s',
      heldText: '2 CPU · held 7 s (<0.1 CPU-h)'
    },
    gone: null
  };
  const status = { kind: 'status', name: 'j', namespace: 'ns' } as const;

  it('is said by the live line of a status panel, so the kernel\'s is hidden', () => {
    const node = document.createElement('div');
    renderLive(node, status, job);
    expect(node.textContent).toContain('2 CPU · held 7 s (<0.1 CPU-h)');
    expect(showsHolds(status, job)).toBe(true);
  });

  it('is the kernel\'s where the live line does not say it', () => {
    expect(showsHolds(status, null)).toBe(false);
    expect(showsHolds(status, { ...job, holds: null })).toBe(false);
    expect(showsHolds(status, { ...job, gone: { reason: 'closed', at: null } })).toBe(false);
    expect(showsHolds({ ...status, kind: 'cell' }, job)).toBe(false);
  });
});
