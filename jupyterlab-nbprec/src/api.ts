/**
 * Calls to the nbprec Jupyter server extension (Python: nbprec/jupyter/server.py).
 */
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

/** What `GET /nbprec/dumps?path=DIR` answers: the entries of DIR that nbprec reads, with their format. */
export interface IDetected {
  path: string;
  dumps: { [name: string]: string };
  complete: boolean;
}

/** What `GET /nbprec/info` answers. */
export interface IInfo {
  version: string;
  rules: string[];
  default_rule: string;
}

/** The investigation notebook to create (`POST /nbprec/notebooks`). */
export interface INotebookRequest {
  /** Folder (server path) the notebook goes into; `target` and `bench` are relative to it. */
  directory: string;
  target: string;
  bench?: string;
  rule?: string;
}

/** An error of the server extension, with the message it sent (one line a user can act on). */
export class NbprecServerError extends Error {
  constructor(
    message: string,
    readonly status: number
  ) {
    super(message);
  }
}

async function request<T>(endpoint: string, init: RequestInit = {}): Promise<T> {
  const settings = ServerConnection.makeSettings();
  const url = URLExt.join(settings.baseUrl, 'nbprec', endpoint);
  let response: Response;
  try {
    response = await ServerConnection.makeRequest(url, init, settings);
  } catch (error) {
    throw new NbprecServerError(`cannot reach the Jupyter server: ${error}`, 0);
  }
  const text = await response.text();
  let data: any = text;
  try {
    data = text ? JSON.parse(text) : {};
  } catch {
    // not JSON: keep the text for the message
  }
  if (!response.ok) {
    const message =
      response.status === 404 && !(data && data.message)
        ? 'the nbprec server extension is not enabled (jupyter server extension enable nbprec)'
        : (data && data.message) || response.statusText;
    throw new NbprecServerError(message, response.status);
  }
  return data as T;
}

/** The dumps among the entries of the folder `path` (a server path, '' for the root). */
export function detectDumps(path: string): Promise<IDetected> {
  return request<IDetected>(`dumps?path=${encodeURIComponent(path)}`);
}

/** nbprec's version and comparison rules. */
export function serverInfo(): Promise<IInfo> {
  return request<IInfo>('info');
}

/** Create an investigation notebook; resolves to its server path. */
export async function createNotebook(body: INotebookRequest): Promise<string> {
  const reply = await request<{ path: string }>('notebooks', {
    method: 'POST',
    body: JSON.stringify(body)
  });
  return reply.path;
}
