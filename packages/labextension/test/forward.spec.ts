import { forwardClosed, renderForwardEnded } from '../src/forward';
import { isStale, liveLine } from '../src/panel';
import { IPanelRef, ISession } from '../src/types';

const ref: IPanelRef = {
  kind: 'forward',
  name: 'j',
  namespace: 'ns',
  uid: 'u',
  port: 6006,
  link: 'http://127.0.0.1:40123/',
  pod: 'j-node-0-0-abcde',
  alias: 'default',
  forwarding: true
};

function job(over: Partial<ISession> = {}): ISession {
  return {
    name: 'j',
    namespace: 'ns',
    uid: 'u',
    state: 'Running',
    pods: [],
    podsReady: '1/1',
    holds: null,
    gone: null,
    ...over
  };
}

describe('a forward panel after its session', () => {
  it('is closed once its job is gone or ended, not before', () => {
    expect(forwardClosed(ref, null)).toBe('');
    expect(forwardClosed(ref, job())).toBe('');
    expect(forwardClosed(ref, job({ gone: { reason: 'closed at kernel exit', at: null } }))).toBe(
      'closed at kernel exit'
    );
    expect(forwardClosed(ref, job({ state: 'Complete' }))).toBe('the TrainJob is Complete');
    // the kernel already drew it stopped, or it is no forward panel: left as drawn
    expect(forwardClosed({ ...ref, forwarding: false }, job({ state: 'Failed' }))).toBe('');
    expect(forwardClosed({ ...ref, kind: 'status' }, job({ state: 'Failed' }))).toBe('');
  });

  it('draws the ended form: Stopped, the link as text, no IFrame', () => {
    const node = document.createElement('div');
    node.innerHTML = '<span class="tjm-state">Forwarding</span><iframe></iframe><a href="x">x</a>';
    renderForwardEnded(node, ref, 'closed at kernel exit');
    expect(node.querySelector('.tjm-state')?.textContent).toBe('Stopped (session ended)');
    expect(node.textContent).not.toContain('Forwarding');
    expect(node.querySelectorAll('iframe, a')).toHaveLength(0);
    expect(node.textContent).toContain(
      "http://127.0.0.1:40123/ → port 6006 of pod j-node-0-0-abcde (session 'default')"
    );
    expect(node.firstElementChild?.getAttribute('title')).toBe(
      'The forward closed with its session: closed at kernel exit.'
    );
  });
});

describe('a cell panel', () => {
  const cell: IPanelRef = { kind: 'cell', name: 'j', namespace: 'ns', uid: 'u' };

  it('says where the cell ran and what the job is now', () => {
    expect(liveLine(cell, job({ podsReady: '2/2', pods: [{ name: 'p', phase: 'Running', ready: true }] }))).toBe(
      'ran in TrainJob j · now Running · 2/2 pods ready'
    );
    const gone = job({ gone: { reason: 'deleted outside trainjob-magics (e.g. kubectl delete)', at: null } });
    expect(liveLine(cell, gone)).toBe(
      'ran in TrainJob j · now Gone: deleted outside trainjob-magics (e.g. kubectl delete)'
    );
  });

  it('keeps its output undimmed: what ran stays true', () => {
    const gone = job({ gone: { reason: 'closed', at: null } });
    expect(isStale(gone, cell)).toBe(false);
    expect(isStale(gone, { ...cell, kind: 'status' })).toBe(true);
  });
});
