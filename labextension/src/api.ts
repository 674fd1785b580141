/**
 * REST calls of the server extension (under the server's base URL, so it works behind JupyterHub).
 */
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

import { parseStop, StopPayload } from './payloads';

/** `DELETE /mgpu/api/clusters/<id>`: stop one of this user's clusters; throws with the server's message. */
export async function stopCluster(
  clusterId: string,
  settings: ServerConnection.ISettings = ServerConnection.makeSettings()
): Promise<StopPayload> {
  const url = URLExt.join(
    settings.baseUrl,
    'mgpu',
    'api',
    'clusters',
    encodeURIComponent(clusterId)
  );
  const response = await ServerConnection.makeRequest(
    url,
    { method: 'DELETE' },
    settings
  );
  const text = await response.text();
  let body: unknown = null;
  try {
    body = text ? JSON.parse(text) : null;
  } catch {
    body = null;
  }
  if (!response.ok) {
    const message =
      body && typeof (body as { message?: unknown }).message === 'string'
        ? (body as { message: string }).message
        : `${response.status} ${response.statusText}`;
    throw new Error(message);
  }
  return parseStop(body);
}
