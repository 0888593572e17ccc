/** The admin API and the router of a test controller, listening on loopback. */
import { buildAdminApp } from '../../src/admin/app.js';
import { buildRouter } from '../../src/router/app.js';
import type { TestController } from './controller.js';

export interface Front {
  readonly adminUrl: string;
  readonly routerUrl: string;
  close(): Promise<void>;
}

export async function serveFront(ctl: TestController, adminToken: string): Promise<Front> {
  const admin = buildAdminApp({ backend: ctl.reconciler, token: adminToken });
  const router = buildRouter({ fleet: ctl.reconciler, auth: { required: false } });
  const adminUrl = await admin.listen({ host: '127.0.0.1', port: 0 });
  const routerUrl = await router.listen({ host: '127.0.0.1', port: 0 });
  return {
    adminUrl,
    routerUrl,
    async close() {
      await router.close();
      await admin.close();
    },
  };
}
