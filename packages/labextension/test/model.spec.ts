import { fetchJob, fetchSessions } from '../src/api';
import { SessionsModel } from '../src/model';
import { ISession, ISnapshot } from '../src/types';

jest.mock('../src/api');

const mockedSessions = fetchSessions as jest.MockedFunction<typeof fetchSessions>;
const mockedJob = fetchJob as jest.MockedFunction<typeof fetchJob>;

function job(uid: string, over: Partial<ISession> = {}): ISession {
  return {
    name: 'tjmsame',
    namespace: 'ns',
    uid,
    state: 'Running',
    pods: [],
    podsReady: '1/1',
    holds: null,
    gone: null,
    ...over
  };
}

/** A model that has read ``snapshot`` (its next long-poll never answers). */
async function modelWith(snapshot: ISnapshot): Promise<SessionsModel> {
  mockedSessions.mockResolvedValueOnce(snapshot).mockReturnValue(new Promise(() => undefined));
  const model = new SessionsModel();
  const read = new Promise<void>(resolve => model.changed.connect(() => resolve()));
  model.start();
  await jest.advanceTimersByTimeAsync(0); // the poll's first tick
  await read;
  return model;
}

describe('a panel finds its job by name and uid', () => {
  beforeEach(() => {
    jest.useFakeTimers();
    mockedSessions.mockReset();
    mockedJob.mockReset();
  });
  afterEach(() => jest.useRealTimers());

  it('keeps the closed job of an old panel apart from the new job of the same name', async () => {
    const closed = job('uid-old', {
      state: 'Gone',
      gone: { reason: 'closed by %trainjob_close', at: null }
    });
    const model = await modelWith({
      version: 3,
      sessions: [job('uid-new')],
      gone: [closed],
      problems: [],
      namespaces: ['ns'],
      user: 'me'
    });
    expect(model.find('ns', 'tjmsame', 'uid-old')?.gone?.reason).toBe('closed by %trainjob_close');
    expect(model.find('ns', 'tjmsame', 'uid-new')?.state).toBe('Running');
    expect(mockedJob).not.toHaveBeenCalled();
  });

  it('asks the server for a uid it has not seen, never taking the namesake', async () => {
    mockedJob.mockResolvedValue(
      job('uid-older', {
        state: 'Gone',
        gone: { reason: 'replaced by a newer TrainJob of the same name', at: null }
      })
    );
    const model = await modelWith({
      version: 1,
      sessions: [job('uid-new')],
      gone: [],
      problems: [],
      namespaces: ['ns'],
      user: 'me'
    });
    expect(model.find('ns', 'tjmsame', 'uid-older')).toBeNull();
    expect(mockedJob).toHaveBeenCalledWith('ns', 'tjmsame', 'uid-older');
    await new Promise(resolve => model.changed.connect(() => resolve(undefined)));
    expect(model.find('ns', 'tjmsame', 'uid-older')?.gone?.reason).toContain('replaced');
  });

  it('a panel without a uid (saved before uids) takes the job of that name', async () => {
    const model = await modelWith({
      version: 1,
      sessions: [job('uid-new')],
      gone: [],
      problems: [],
      namespaces: ['ns'],
      user: 'me'
    });
    expect(model.find('ns', 'tjmsame', '')?.uid).toBe('uid-new');
  });
});
