import { fetchJob, fetchSessions } from '../src/api';
import { POLL_INTERVAL_MS, SessionsModel } from '../src/model';
import { ISession, ISnapshot } from '../src/types';

jest.mock('../src/api');

const mockedSessions = fetchSessions as jest.MockedFunction<typeof fetchSessions>;
const mockedJob = fetchJob as jest.MockedFunction<typeof fetchJob>;

function snapshot(version: number): ISnapshot {
  return { version, sessions: [], gone: [], problems: [], namespaces: ['ns'], user: 'me' };
}

function record(state: string): ISession {
  return {
    name: 'tjmother',
    namespace: 'ns',
    uid: 'uid-1',
    state,
    pods: [],
    podsReady: '0/0',
    holds: null,
    gone: null
  };
}

/** The next emission of the model's ``changed``. */
function nextChange(model: SessionsModel): Promise<void> {
  return new Promise(resolve => {
    const once = (): void => {
      model.changed.disconnect(once);
      resolve();
    };
    model.changed.connect(once);
  });
}

describe('the records of jobs a panel asked for one by one', () => {
  beforeEach(() => {
    jest.useFakeTimers();
    mockedSessions.mockReset();
    mockedJob.mockReset();
  });
  afterEach(() => jest.useRealTimers());

  it('are kept while the snapshot version stays, dropped and asked again when it changes', async () => {
    let answerSecond: (snap: ISnapshot) => void = () => undefined;
    const second = new Promise<ISnapshot>(resolve => (answerSecond = resolve));
    mockedSessions
      .mockResolvedValueOnce(snapshot(1))
      .mockReturnValueOnce(second)
      .mockReturnValue(new Promise(() => undefined));
    mockedJob.mockResolvedValueOnce(record('Running')).mockResolvedValueOnce(record('Failed'));

    const model = new SessionsModel();
    const firstRead = nextChange(model);
    model.start();
    await jest.advanceTimersByTimeAsync(0); // the poll's first tick
    await firstRead;

    // not in the snapshot: asked once, then served from the cache under version 1
    expect(model.find('ns', 'tjmother', 'uid-1')).toBeNull();
    const cached = nextChange(model);
    await cached;
    expect(model.find('ns', 'tjmother', 'uid-1')?.state).toBe('Running');
    expect(model.find('ns', 'tjmother', 'uid-1')?.state).toBe('Running');
    expect(mockedJob).toHaveBeenCalledTimes(1);

    // version 2: the cached record is dropped (not shown as the job's state) and asked again
    const secondRead = nextChange(model);
    answerSecond(snapshot(2));
    await jest.advanceTimersByTimeAsync(POLL_INTERVAL_MS); // the next long-poll
    await secondRead;
    expect(model.find('ns', 'tjmother', 'uid-1')).toBeNull();
    expect(mockedJob).toHaveBeenCalledTimes(2);
    const fresh = nextChange(model);
    await fresh;
    expect(model.find('ns', 'tjmother', 'uid-1')?.state).toBe('Failed');
    expect(mockedJob).toHaveBeenCalledTimes(2);
  });

  it('are kept when the long-poll answers the same version again', async () => {
    let answerSecond: (snap: ISnapshot) => void = () => undefined;
    const second = new Promise<ISnapshot>(resolve => (answerSecond = resolve));
    mockedSessions
      .mockResolvedValueOnce(snapshot(4))
      .mockReturnValueOnce(second)
      .mockReturnValue(new Promise(() => undefined));
    mockedJob.mockResolvedValue(record('Running'));

    const model = new SessionsModel();
    const firstRead = nextChange(model);
    model.start();
    await jest.advanceTimersByTimeAsync(0); // the poll's first tick
    await firstRead;
    model.find('ns', 'tjmother', 'uid-1');
    await nextChange(model);

    const secondRead = nextChange(model);
    answerSecond(snapshot(4)); // the wait ran out with nothing new
    await jest.advanceTimersByTimeAsync(POLL_INTERVAL_MS); // the next long-poll
    await secondRead;
    expect(model.find('ns', 'tjmother', 'uid-1')?.state).toBe('Running');
    expect(mockedJob).toHaveBeenCalledTimes(1);
  });
});
