/**
 * Run an investigation notebook once, when it first opens: only notebooks this browser just created.
 *
 * The request is kept in localStorage (shared by the tabs of one server), so that it works in JupyterLab,
 * where the notebook opens in this page, and in Notebook 7, where it opens in a new tab. A notebook's own
 * content never asks for it, so opening someone else's notebook runs nothing.
 */
import { INotebookTracker, NotebookActions, NotebookPanel } from '@jupyterlab/notebook';

const KEY = 'nbprec:autorun';
/** Requests older than this are dropped (the notebook was never opened). */
const MAX_AGE_MS = 10 * 60 * 1000;

type Pending = { [path: string]: number };

function read(): Pending {
  try {
    const pending = JSON.parse(window.localStorage.getItem(KEY) || '{}');
    return pending && typeof pending === 'object' ? pending : {};
  } catch {
    return {};
  }
}

function write(pending: Pending): void {
  try {
    window.localStorage.setItem(KEY, JSON.stringify(pending));
  } catch {
    // storage disabled: the user runs the cells
  }
}

/** Ask for the notebook at `path` (a server path) to run all its cells when it opens. */
export function requestAutorun(path: string): void {
  const now = Date.now();
  const pending = read();
  for (const [key, time] of Object.entries(pending)) {
    if (now - time > MAX_AGE_MS) {
      delete pending[key];
    }
  }
  pending[path] = now;
  write(pending);
}

/** Whether `path` was asked to run; the request is used up. */
function takeAutorun(path: string): boolean {
  const pending = read();
  const time = pending[path];
  if (time === undefined) {
    return false;
  }
  delete pending[path];
  write(pending);
  return Date.now() - time <= MAX_AGE_MS;
}

/**
 * Run all the cells of `panel` if it was asked to. Notebook 7's file browser page makes a panel and disposes
 * of it at once, opening the notebook in a new browser tab: the request is left for that tab.
 */
async function runIfRequested(panel: NotebookPanel): Promise<void> {
  await panel.context.ready;
  if (panel.isDisposed || !takeAutorun(panel.context.path)) {
    return;
  }
  await panel.sessionContext.ready;
  await NotebookActions.runAll(panel.content, panel.sessionContext);
}

function watch(panel: NotebookPanel): void {
  runIfRequested(panel).catch(error => console.warn('nbprec: could not run the notebook', error));
}

/**
 * Run the requested notebooks as the tracker sees them open, and those already open: Notebook 7 opens the
 * notebook of its page before this extension is activated.
 */
export function watchNotebooks(tracker: INotebookTracker): void {
  tracker.forEach(watch);
  tracker.widgetAdded.connect((_, panel) => watch(panel));
}
