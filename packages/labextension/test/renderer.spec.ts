import { renderLive } from '../src/panel';
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
